package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// holdArgs is a job that finishes after MS milliseconds. With HoldFirst its
// first attempt instead runs until its context ends, and so does every
// attempt by the process HoldOn.
type holdArgs struct {
	Key       string `json:"key"`
	MS        int    `json:"ms"`
	HoldFirst bool   `json:"hold_first,omitempty"`
	HoldOn    string `json:"hold_on,omitempty"`
}

func (holdArgs) Kind() string { return "test.hold" }

// holdRun is one attempt of a hold job as its worker saw it.
type holdRun struct {
	process    string
	attempt    int
	start, end time.Time
	cause      error // of the context, when it ended the attempt
}

// holdLog collects the attempts of hold jobs across the runtimes of a test.
type holdLog struct {
	mu      sync.Mutex
	runs    []holdRun
	started chan holdRun
}

func newHoldLog() *holdLog { return &holdLog{started: make(chan holdRun, 16)} }

func (l *holdLog) all() []holdRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]holdRun(nil), l.runs...)
}

type holdWorker struct {
	river.WorkerDefaults[holdArgs]
	process string
	log     *holdLog
}

// Timeout: attempts end by their context only (or their own timer).
func (w *holdWorker) Timeout(*river.Job[holdArgs]) time.Duration { return -1 }

func (w *holdWorker) Work(ctx context.Context, job *river.Job[holdArgs]) error {
	run := holdRun{process: w.process, attempt: job.Attempt, start: time.Now()}
	w.log.started <- run
	var err error
	if job.Attempt == 1 && job.Args.HoldFirst || job.Args.HoldOn == w.process {
		<-ctx.Done()
		err = ctx.Err()
		run.cause = context.Cause(ctx)
	} else {
		select {
		case <-time.After(time.Duration(job.Args.MS) * time.Millisecond):
		case <-ctx.Done():
			err = ctx.Err()
			run.cause = context.Cause(ctx)
		}
	}
	run.end = time.Now()
	w.log.mu.Lock()
	w.log.runs = append(w.log.runs, run)
	w.log.mu.Unlock()
	return err
}

// startHoldRuntime starts a runtime on db's schema that works hold jobs.
func startHoldRuntime(t *testing.T, db *pgtest.DB, cfg queue.RuntimeConfig, log *holdLog) *queue.Runtime {
	t.Helper()
	return pgtest.StartRuntime(t, db, cfg, func(rt *queue.Runtime) {
		queue.AddWorker(rt, &holdWorker{process: rt.ProcessID(), log: log})
	})
}

// waitStarted returns the next attempt a hold worker started.
func waitStarted(t *testing.T, log *holdLog, timeout time.Duration) holdRun {
	t.Helper()
	select {
	case run := <-log.started:
		return run
	case <-time.After(timeout):
		t.Fatalf("no hold job attempt started within %s", timeout)
		return holdRun{}
	}
}

// jobRow is what the liveness tests read back of a job.
type jobRow struct {
	State       string
	Attempt     int
	AttemptedBy []string
	Errors      []rivertype.AttemptError
	Metadata    map[string]any
	Finalized   bool
	Due         bool // scheduled_at <= now()
}

func readJob(t *testing.T, db *pgtest.DB, id int64) jobRow {
	t.Helper()
	var j jobRow
	var errs [][]byte
	var meta []byte
	err := db.Pool.QueryRow(context.Background(), db.Q(`
SELECT state::text, attempt, coalesce(attempted_by, '{}'), coalesce(errors, '{}'), metadata, finalized_at IS NOT NULL, scheduled_at <= now()
FROM /*schema*/river_job WHERE id = $1`), id).Scan(&j.State, &j.Attempt, &j.AttemptedBy, &errs, &meta, &j.Finalized, &j.Due)
	require.NoError(t, err)
	for _, e := range errs {
		var ae rivertype.AttemptError
		require.NoError(t, json.Unmarshal(e, &ae))
		j.Errors = append(j.Errors, ae)
	}
	require.NoError(t, json.Unmarshal(meta, &j.Metadata))
	return j
}

// addProcess writes a process row whose heartbeat is age old.
func addProcess(t *testing.T, db *pgtest.DB, id string, age time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`
INSERT INTO /*schema*/tributary_process (id, hostname, pid, queues, started_at, heartbeat_at)
VALUES ($1, 'host-of-'||$1, 4242, '{default}', now() - interval '1 day', now() - $2::float8 * interval '1 second')`), id, age.Seconds())
	require.NoError(t, err)
}

// runningJob inserts a hold job and makes it look as if attemptedBy's last
// process fetched it for its attempt-th attempt.
func runningJob(t *testing.T, db *pgtest.DB, client *queue.Client, maxAttempts, attempt int, attemptedBy []string, metadata string) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := client.Enqueue(ctx, holdArgs{Key: strings.Join(attemptedBy, ",")}, &queue.EnqueueOpts{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`
UPDATE /*schema*/river_job SET state = 'running', attempt = $2, attempted_at = now() - interval '5 minutes', attempted_by = $3,
    metadata = metadata || $4::jsonb
WHERE id = $1`), res.Job.ID, attempt, attemptedBy, metadata)
	require.NoError(t, err)
	return res.Job.ID
}

func processRow(t *testing.T, db *pgtest.DB, id string) (exists, swept bool) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT swept_at IS NOT NULL FROM /*schema*/tributary_process WHERE id = $1`), id).Scan(&swept)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false
	}
	require.NoError(t, err)
	return true, swept
}

func TestLivenessSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const timeout = 30 * time.Second

	type testBundle struct {
		db     *pgtest.DB
		client *queue.Client
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		return &testBundle{db: db, client: db.Client(t)}
	}

	t.Run("DeadProcessJobsAvailableAgainWithTheAttemptCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "dead-1", time.Minute)
		id := runningJob(t, b.db, b.client, 25, 2, []string{"earlier", "dead-1"}, `{}`)

		_, err := queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)

		j := readJob(t, b.db, id)
		require.Equal(t, "available", j.State)
		require.True(t, j.Due, "available now, not after a backoff")
		require.False(t, j.Finalized)
		require.Equal(t, 2, j.Attempt, "the attempt River counted at fetch stays counted")
		require.Len(t, j.Errors, 1)
		require.Equal(t, 2, j.Errors[0].Attempt)
		require.Contains(t, j.Errors[0].Error, "dead-1")
		require.Contains(t, j.Errors[0].Error, "host-of-dead-1")
		require.Contains(t, j.Errors[0].Error, "liveness sweep")
		require.WithinDuration(t, time.Now(), j.Errors[0].At, time.Minute)
		require.EqualValues(t, 1, j.Metadata["river:rescue_count"])

		exists, swept := processRow(t, b.db, "dead-1")
		require.True(t, exists, "the dead process's row stays for a while")
		require.True(t, swept)
		stale, err := queue.StaleProcesses(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.Equal(t, []string{"dead-1"}, stale)

		// A second sweep has nothing left to do.
		_, err = queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.Len(t, readJob(t, b.db, id).Errors, 1)
	})

	t.Run("OutOfAttemptsDiscarded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "dead-1", time.Minute)
		id := runningJob(t, b.db, b.client, 3, 3, []string{"dead-1"}, `{}`)

		_, err := queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		j := readJob(t, b.db, id)
		require.Equal(t, "discarded", j.State)
		require.True(t, j.Finalized)
		require.Len(t, j.Errors, 1)
		require.Contains(t, j.Errors[0].Error, "dead-1")
	})

	t.Run("CancelRequestedCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "dead-1", time.Minute)
		id := runningJob(t, b.db, b.client, 25, 1, []string{"dead-1"}, `{"cancel_attempted_at": "2026-12-01T00:00:00Z"}`)

		_, err := queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		j := readJob(t, b.db, id)
		require.Equal(t, "cancelled", j.State)
		require.True(t, j.Finalized)
	})

	t.Run("LiveAndUnknownProcessesUntouched", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "dead-1", time.Minute)
		addProcess(t, b.db, "live-1", time.Second)
		live := runningJob(t, b.db, b.client, 25, 1, []string{"live-1"}, `{}`)
		// Attempted by the dead process before, by a live one now.
		movedOn := runningJob(t, b.db, b.client, 25, 2, []string{"dead-1", "live-1"}, `{}`)
		// A River client with no process row (a plain River client sharing
		// the schema): nobody can tell whether it is alive, so River's own
		// rescuer handles it.
		unknown := runningJob(t, b.db, b.client, 25, 1, []string{"plain-river-client"}, `{}`)

		_, err := queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		for _, id := range []int64{live, movedOn, unknown} {
			j := readJob(t, b.db, id)
			require.Equal(t, "running", j.State, "job %d", id)
			require.Empty(t, j.Errors, "job %d", id)
		}
		_, swept := processRow(t, b.db, "live-1")
		require.False(t, swept)
		_, swept = processRow(t, b.db, "dead-1")
		require.True(t, swept)
	})

	t.Run("NextSweepWhenTheOldestHeartbeatGoesStale", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		next, err := queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.Zero(t, next, "no process, nothing to wait for")

		addProcess(t, b.db, "live-1", 20*time.Second)
		addProcess(t, b.db, "live-2", 5*time.Second)
		next, err = queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.InDelta(t, (10 * time.Second).Seconds(), next.Seconds(), 1)
	})

	t.Run("SweptRowsDeletedAfterRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "old", 3*time.Hour)
		_, err := b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_process SET swept_at = now() - $1::float8 * interval '1 second' - interval '1 minute'`), queue.DeadProcessRetention.Seconds())
		require.NoError(t, err)
		_, err = queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		exists, _ := processRow(t, b.db, "old")
		require.False(t, exists)
	})

	t.Run("OneSweeperAtATime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		addProcess(t, b.db, "dead-1", time.Minute)
		id := runningJob(t, b.db, b.client, 25, 1, []string{"dead-1"}, `{}`)

		// A sweep in progress elsewhere holds the lock: this one skips.
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		dead, err := queue.SweepTx(ctx, tx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.Equal(t, []string{"dead-1"}, dead)
		_, err = queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, "running", readJob(t, b.db, id).State, "the skipping sweep changed nothing; the holder rolled back")

		_, err = queue.Sweep(ctx, b.db.Pool, b.db.Schema, timeout)
		require.NoError(t, err)
		require.Equal(t, "available", readJob(t, b.db, id).State)
	})
}

func TestLivenessRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RowWhileRunningRemovedOnCleanStop", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		log := newHoldLog()
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), LivenessTimeout: 3 * time.Second, ShutdownTimeout: 100 * time.Millisecond,
			FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond, Queues: map[string]int{"default": 2, "other": 1}})
		require.NoError(t, err)
		queue.AddWorker(rt, &holdWorker{process: rt.ProcessID(), log: log})
		require.True(t, strings.HasPrefix(rt.ProcessID(), "tributary-"), rt.ProcessID())
		require.Equal(t, queue.LivenessTimeoutDefault, 30*time.Second)
		require.NoError(t, rt.Start(ctx))
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				_ = rt.Stop(context.Background())
			}
		})

		var hostname string
		var pid int
		var queues []string
		var first time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT hostname, pid, queues, heartbeat_at FROM /*schema*/tributary_process WHERE id = $1`), rt.ProcessID()).
			Scan(&hostname, &pid, &queues, &first))
		wantHost, _ := os.Hostname()
		require.Equal(t, wantHost, hostname)
		require.Equal(t, os.Getpid(), pid)
		require.Equal(t, []string{"default", "other"}, queues)
		pgtest.WaitFor(t, 10*time.Second, "the heartbeat to advance", func() (bool, error) {
			var at time.Time
			err := db.Pool.QueryRow(ctx, db.Q(`SELECT heartbeat_at FROM /*schema*/tributary_process WHERE id = $1`), rt.ProcessID()).Scan(&at)
			return at.After(first), err
		})

		// River records this process's id as the job's attempt.
		res, err := rt.Enqueue(ctx, holdArgs{Key: "k", HoldFirst: true}, nil)
		require.NoError(t, err)
		waitStarted(t, log, 10*time.Second)
		require.Equal(t, []string{rt.ProcessID()}, readJob(t, db, res.Job.ID).AttemptedBy)

		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(stopCtx))
		stopped = true
		exists, _ := processRow(t, db, rt.ProcessID())
		require.False(t, exists, "a clean stop removes the row")
		// The job interrupted by the stop was snoozed by River's hard stop,
		// not left running.
		require.NotEqual(t, "running", readJob(t, db, res.Job.ID).State)
	})

	t.Run("LongJobOfLiveProcessUntouched", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		log := newHoldLog()
		cfg := queue.RuntimeConfig{LivenessTimeout: 3 * time.Second}
		worker := startHoldRuntime(t, db, cfg, log)
		// The job runs for more than twice the liveness timeout while a
		// second process sweeps too.
		res, err := worker.Enqueue(ctx, holdArgs{Key: "long", MS: 7000}, nil)
		require.NoError(t, err)
		waitStarted(t, log, 10*time.Second)
		startHoldRuntime(t, db, cfg, log)
		db.WaitForJobState(t, res.Job.ID, rivertype.JobStateCompleted, 20*time.Second)
		j := readJob(t, db, res.Job.ID)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, []string{worker.ProcessID()}, j.AttemptedBy)
		require.Empty(t, j.Errors)
		_, swept := processRow(t, db, worker.ProcessID())
		require.False(t, swept)
	})

	t.Run("DeclaredDeadStopsAndLeavesTheJobToOthers", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		log := newHoldLog()
		cfg := queue.RuntimeConfig{LivenessTimeout: 5 * time.Second}
		victim := startHoldRuntime(t, db, cfg, log)
		res, err := victim.Enqueue(ctx, holdArgs{Key: "j", MS: 50, HoldOn: victim.ProcessID()}, nil)
		require.NoError(t, err)
		first := waitStarted(t, log, 10*time.Second)
		require.Equal(t, victim.ProcessID(), first.process)
		survivor := startHoldRuntime(t, db, cfg, log)

		// What a sweep does when the victim's heartbeat is stale (a process
		// paused for longer than the timeout): the row lock keeps the
		// victim's next heartbeat from landing in between.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_process SET heartbeat_at = now() - interval '1 hour' WHERE id = $1`), victim.ProcessID())
		require.NoError(t, err)
		// The runtimes' own sweeps hold the sweep lock now and then; this
		// one skips until it gets it.
		pgtest.WaitFor(t, 10*time.Second, "the sweep to declare the victim dead", func() (bool, error) {
			dead, err := queue.SweepTx(ctx, tx, db.Pool, db.Schema, cfg.LivenessTimeout)
			return len(dead) == 1 && dead[0] == victim.ProcessID(), err
		})
		require.NoError(t, tx.Commit(ctx))

		// Until its next heartbeat finds the row swept, the victim may
		// still fetch the job again; it loses that attempt the same way.
		for {
			run := waitStarted(t, log, 10*time.Second)
			if run.process == survivor.ProcessID() {
				break
			}
		}
		select {
		case <-victim.LivenessLost():
		case <-time.After(30 * time.Second):
			t.Fatal("the process declared dead did not stop")
		}
		db.WaitForJobState(t, res.Job.ID, rivertype.JobStateCompleted, 10*time.Second)

		j := readJob(t, db, res.Job.ID)
		require.Equal(t, survivor.ProcessID(), j.AttemptedBy[len(j.AttemptedBy)-1])
		require.Equal(t, victim.ProcessID(), j.AttemptedBy[0])
		// Every attempt before the survivor's last has one error, written
		// by a rescue and naming the victim: the victim wrote no result.
		require.Len(t, j.Errors, j.Attempt-1)
		for _, e := range j.Errors {
			require.Contains(t, e.Error, victim.ProcessID())
		}
		victimRuns := 0
		for _, r := range log.all() {
			if r.process == victim.ProcessID() {
				victimRuns++
				require.ErrorIs(t, r.cause, queue.ErrLivenessLost)
			}
		}
		require.Positive(t, victimRuns, "the victim's attempt was cancelled and returned")
	})

	t.Run("SameIDTakesOverFromADeadProcess", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		log := newHoldLog()
		addProcess(t, db, "fixed-id", time.Hour)
		id := runningJob(t, db, db.Client(t), 25, 1, []string{"fixed-id"}, `{}`)
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET args = '{"key":"x","ms":10}' WHERE id = $1`), id)
		require.NoError(t, err)

		rt := startHoldRuntime(t, db, queue.RuntimeConfig{ID: "fixed-id", LivenessTimeout: 3 * time.Second}, log)
		require.Equal(t, "fixed-id", rt.ProcessID())
		db.WaitForJobState(t, id, rivertype.JobStateCompleted, 10*time.Second)
		j := readJob(t, db, id)
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.Errors, 1)
		require.Contains(t, j.Errors[0].Error, "restarted under the same id")
	})

	t.Run("SameIDAsALiveProcessFailsToStart", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		cfg := queue.RuntimeConfig{ID: "twin", LivenessTimeout: 3 * time.Second}
		startHoldRuntime(t, db, cfg, newHoldLog())

		cfg.Schema, cfg.Logger = db.Schema, pgtest.Logger(t)
		twin, err := queue.NewRuntime(db.Pool, cfg)
		require.NoError(t, err)
		startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = twin.Start(startCtx)
		require.ErrorContains(t, err, `process id "twin" is in use by a live process`)
	})
}

// TestLostCompletionRunsAgain: a job running in the database under a live
// process that no longer runs it (River's completer could not record its
// end: the database restarted, and River gives the completion up after a
// few tries) is made available again by that process within a sweep, and
// runs; a job the process does run, however long, is left alone. Before
// this, such a job stayed running until River's rescuer (an hour), and
// with it an event lane (TestChaosPostgresRestart: four dispatch jobs
// running for five minutes after the restarts).
func TestLostCompletionRunsAgain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	log := newHoldLog()
	rt := startHoldRuntime(t, db, queue.RuntimeConfig{LivenessTimeout: 2 * time.Second}, log)
	me := rt.ProcessID()

	// A job this process runs, held in its Work, that looks an hour old.
	held, err := rt.Client.Enqueue(ctx, holdArgs{Key: "held", HoldOn: me}, nil)
	require.NoError(t, err)
	run := waitStarted(t, log, 30*time.Second)
	require.Equal(t, me, run.process)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET attempted_at = now() - interval '1 hour' WHERE id = $1`), held.Job.ID)
	require.NoError(t, err)

	// A job this process fetched and lost the end of: running under its
	// id, nothing in the process runs it. Inserted scheduled, so no
	// producer fetches it before it is made to look running.
	lost, err := rt.Client.Enqueue(ctx, holdArgs{Key: "lost", MS: 1}, &queue.EnqueueOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`
UPDATE /*schema*/river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour',
    attempted_by = ARRAY[$2::text], scheduled_at = now() - interval '1 hour'
WHERE id = $1`), lost.Job.ID, me)
	require.NoError(t, err)

	// Seen by a look, lost at the first look lostJobAfter (20 s) later:
	// within seconds, not a minute.
	pgtest.WaitFor(t, 45*time.Second, "the lost job runs again and completes", func() (bool, error) {
		return readJob(t, db, lost.Job.ID).State == "completed", nil
	})
	j := readJob(t, db, lost.Job.ID)
	require.Equal(t, 2, j.Attempt, "the lost attempt stays counted")
	require.NotEmpty(t, j.Errors)
	require.Contains(t, j.Errors[0].Error, me, "the rescue names the process")
	require.EqualValues(t, 1, j.Metadata["river:rescue_count"])

	// The sweep that rescued the lost job saw the held one too: it is still
	// running its first attempt.
	h := readJob(t, db, held.Job.ID)
	require.Equal(t, "running", h.State)
	require.Equal(t, 1, h.Attempt)
	require.Empty(t, h.Errors)
}
