package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// attemptView is one job's current attempt as the liveness tests read it.
type attemptView struct {
	state       string
	attempt     int
	attemptedBy []string
	attemptedAt *time.Time
	finalizedAt *time.Time
	errors      int
}

func readAttempt(t *testing.T, db *pgtest.DB, id int64) attemptView {
	t.Helper()
	var v attemptView
	err := db.Pool.QueryRow(context.Background(), db.Q(`
SELECT state::text, attempt, coalesce(attempted_by, '{}'), attempted_at, finalized_at, coalesce(cardinality(errors), 0)
FROM /*schema*/river_job WHERE id = $1`), id).Scan(&v.state, &v.attempt, &v.attemptedBy, &v.attemptedAt, &v.finalizedAt, &v.errors)
	require.NoError(t, err)
	return v
}

func (v attemptView) lastAttemptedBy() string {
	if len(v.attemptedBy) == 0 {
		return ""
	}
	return v.attemptedBy[len(v.attemptedBy)-1]
}

// liveProcesses counts the schema's processes that heartbeat.
func liveProcesses(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/tributary_process WHERE swept_at IS NULL`)).Scan(&n))
	return n
}

// sigkill kills a worker process with SIGKILL, logs how old its last
// heartbeat was (the restart comes the liveness timeout after that
// heartbeat, not after the kill), and returns when the process is gone.
func sigkill(t *testing.T, db *pgtest.DB, cmd *exec.Cmd) time.Time {
	t.Helper()
	var age time.Duration
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
SELECT (extract(epoch FROM now() - heartbeat_at) * 1e9)::bigint FROM /*schema*/tributary_process WHERE pid = $1`), cmd.Process.Pid).Scan(&age))
	at := time.Now()
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	t.Logf("killed worker pid %d; its last heartbeat was %s old", cmd.Process.Pid, age.Round(10*time.Millisecond))
	return at
}

// TestWorkerSIGKILLRunningJobRunsAgain kills a worker (default
// configuration) in the middle of a 20 s demo.sleep; a second worker makes
// the job available again once the dead worker's heartbeat is older than the
// liveness timeout (30 s), not after River's one-hour rescue, and completes
// it.
func TestWorkerSIGKILLRunningJobRunsAgain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := db.Client(t)
	ctx := context.Background()

	doomed, _ := startWorker(t, db)
	res, err := client.Enqueue(ctx, demojobs.SleepArgs{MS: 20_000}, nil)
	require.NoError(t, err)
	var first attemptView
	pgtest.WaitFor(t, 30*time.Second, "the job running on the first worker", func() (bool, error) {
		first = readAttempt(t, db, res.Job.ID)
		return first.state == "running", nil
	})
	survivor, survivorLogs := startWorker(t, db)
	pgtest.WaitFor(t, 30*time.Second, "both workers heartbeating", func() (bool, error) {
		return liveProcesses(t, db) == 2, nil
	})

	killedAt := sigkill(t, db, doomed)
	var again attemptView
	pgtest.WaitFor(t, 90*time.Second, "the job running again on the second worker", func() (bool, error) {
		again = readAttempt(t, db, res.Job.ID)
		return again.state == "running" && again.attempt == 2, nil
	})
	restartedAfter := again.attemptedAt.Sub(killedAt)
	t.Logf("SIGKILL to restart on the second worker: %s (liveness timeout 30s; River's rescuer alone: 1h)", restartedAfter.Round(100*time.Millisecond))
	require.Less(t, restartedAfter, 60*time.Second)
	require.NotEqual(t, first.lastAttemptedBy(), again.lastAttemptedBy())

	db.WaitForJobState(t, res.Job.ID, "completed", 60*time.Second)
	done := readAttempt(t, db, res.Job.ID)
	require.Equal(t, 2, done.attempt)
	require.Equal(t, 1, done.errors, "one error: the rescue naming the killed worker")
	_, code := stopWorker(t, survivor, 40*time.Second)
	require.Equal(t, 0, code, "survivor logs:\n%s", survivorLogs.String())
}

// TestWorkerSIGKILLHeldLane kills a worker (default configuration) while
// it dispatches an ordered event that takes 20 s, with a second event of the
// same aggregate waiting behind it in the lane. The second worker runs the
// interrupted dispatch again once the liveness timeout has passed, then the
// event behind it, in order.
func TestWorkerSIGKILLHeldLane(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	doomed, _ := startWorker(t, db)
	for _, payload := range []string{`{"text":"first","sleep_ms":20000}`, `{"text":"second"}`} {
		res := cli(t, db, nil, "emit", "demo.note", payload, "--aggregate", "lane-1")
		require.Equal(t, exitOK, res.code, res.stderr)
	}
	// The first's dispatch job runs; the second waits behind it as a lane
	// event (no job until its turn).
	var firstID int64
	pgtest.WaitFor(t, 30*time.Second, "the first event's dispatch running, the second's waiting", func() (bool, error) {
		var state string
		var waiting int
		err := db.Pool.QueryRow(context.Background(), db.Q(`
SELECT j.id, j.state::text, (SELECT count(*) FROM /*schema*/tributary_event_lane_event WHERE aggregate_id = 'lane-1')
FROM /*schema*/river_job j
WHERE j.kind = $1 AND j.args ->> 'aggregate_id' = 'lane-1' AND (j.args ->> 'seq')::bigint = 1`), events.DispatchKind).Scan(&firstID, &state, &waiting)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return state == "running" && waiting == 1, err
	})
	survivor, survivorLogs := startWorker(t, db)
	pgtest.WaitFor(t, 30*time.Second, "both workers heartbeating", func() (bool, error) {
		return liveProcesses(t, db) == 2, nil
	})

	killedAt := sigkill(t, db, doomed)
	// The first's slow handler ends its chain: the second gets a dispatch
	// job of its own when its turn comes.
	var secondID int64
	pgtest.WaitFor(t, 120*time.Second, "the second event's dispatch job", func() (bool, error) {
		err := db.Pool.QueryRow(context.Background(), db.Q(`
SELECT id FROM /*schema*/river_job WHERE kind = $1 AND args ->> 'aggregate_id' = 'lane-1' AND (args ->> 'seq')::bigint = 2`), events.DispatchKind).Scan(&secondID)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	db.WaitForJobState(t, secondID, "completed", 120*time.Second)
	first, second := readAttempt(t, db, firstID), readAttempt(t, db, secondID)
	require.Equal(t, "completed", first.state)
	require.Equal(t, 2, first.attempt, "the interrupted dispatch ran again")
	require.Equal(t, 1, second.attempt)
	require.False(t, second.attemptedAt.Before(*first.finalizedAt), "the second event was handled before the first finished: %s < %s", second.attemptedAt, first.finalizedAt)
	restartedAfter := first.attemptedAt.Sub(killedAt)
	t.Logf("SIGKILL to restart of the held lane's dispatch on the second worker: %s; both events handled, in order, %s after the kill",
		restartedAfter.Round(100*time.Millisecond), second.finalizedAt.Sub(killedAt).Round(100*time.Millisecond))
	require.Less(t, restartedAfter, 60*time.Second)

	_, code := stopWorker(t, survivor, 40*time.Second)
	require.Equal(t, 0, code, "survivor logs:\n%s", survivorLogs.String())
}

// TestWorkerDatabaseLostExits cuts a worker off its database (the database
// stays up for everyone else). The worker must stop working before the
// others may take it for dead, and exit 1 saying why.
func TestWorkerDatabaseLostExits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := db.Client(t)
	proxy := pgtest.NewCutProxy(t, db.URL)

	worker, logs := startWorker(t, db, "DATABASE_URL="+proxy.URL(), "TRIBUTARY_LIVENESS_TIMEOUT=3s")
	res, err := client.Enqueue(context.Background(), demojobs.SleepArgs{MS: 60_000}, nil)
	require.NoError(t, err)
	db.WaitForJobState(t, res.Job.ID, "running", 30*time.Second)
	// River runs jobs before the services after it have started; a cut
	// before the forwarder's LISTEN connection is open fails the start
	// instead (seen under load), which is another test's case.
	pgtest.WaitFor(t, 30*time.Second, "the worker to finish starting", func() (bool, error) {
		return strings.Contains(logs.String(), `msg="runtime started"`), nil
	})

	cutAt := time.Now()
	proxy.Cut()
	done := make(chan error, 1)
	go func() { done <- worker.Wait() }()
	select {
	case err := <-done:
		exitErr, ok := err.(*exec.ExitError)
		require.True(t, ok, "worker exited with %v; logs:\n%s", err, logs.String())
		require.Equal(t, exitFailure, exitErr.ExitCode(), "logs:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker cut off its database did not exit; logs:\n%s", logs.String())
	}
	t.Logf("cut to exit: %s", time.Since(cutAt).Round(100*time.Millisecond))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "tributary: liveness lost: no heartbeat reached the database"), "last line: %s", last)
	require.Contains(t, logs.String(), "job result withheld")
}
