package limits_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/limits/internal/replica"
	"github.com/tributary-run/tributary/queue"
)

// TestReplicasKeepPerKeyLimit runs three worker processes over one limit
// of 2 per key and 20 keys, with more workers than the limit leaves room
// for, and samples the running jobs of every key until every job
// completed: no key ever has more than 2 running (nor more than 2 holding
// a slot, running or available), and every job completes. The second
// case SIGKILLs one process mid-run: its running jobs keep their slots
// until liveness (2 s here) makes them available to the others.
func TestReplicasKeepPerKeyLimit(t *testing.T) {
	t.Parallel()
	bin := buildLimitWorker(t)
	for _, tt := range []struct {
		name string
		kill bool
	}{{"AllLive", false}, {"OneKilled", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const (
				maxPerKey = 2
				keys      = 20
				perKey    = 25
				workMS    = 50
			)
			db := pgtest.New(t)
			ctx := context.Background()
			procs := make([]*exec.Cmd, 3)
			for i := range procs {
				procs[i] = startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), fmt.Sprintf("LIMIT_MAX=%d", maxPerKey))
			}
			insertReplicaJobs(t, db, maxPerKey, keys, perKey, workMS)
			total := keys * perKey

			killed, victim := !tt.kill, 0
			ks := keySampler{limit: maxPerKey}
			deadline := time.Now().Add(3 * time.Minute)
			for {
				done := ks.sample(t, db)
				if done == total {
					break
				}
				switch {
				case !killed && victim == 0 && done >= total/3:
					pid := procs[0].Process.Pid
					if held := runningUnderPID(t, db, fmt.Sprint(pid)); held >= 3 {
						require.NoError(t, procs[0].Process.Signal(syscall.SIGKILL))
						victim = pid
						t.Logf("SIGKILLed w0 after %d of %d jobs completed; it had %d jobs running a moment before", done, total, held)
					}
				case victim != 0 && runningUnderPID(t, db, fmt.Sprint(victim)) == 0:
					// Nothing runs under the dead process any more: liveness
					// took its jobs back, or they all completed between the
					// count and the kill (a commit already on its way), and
					// then a fresh w0 is killed later.
					if killed = rescuedFrom(t, db, victim) > 0; !killed {
						t.Logf("w0 (pid %d) had no job left running when it died: killing a fresh one later", victim)
						procs[0] = startLimitWorker(t, bin, db, "w0-again", fmt.Sprintf("LIMIT_MAX=%d", maxPerKey))
					}
					victim = 0
				}
				require.True(t, time.Now().Before(deadline), "only %d of %d jobs completed", done, total)
			}
			var rescued int
			require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE errors IS NOT NULL`)).Scan(&rescued))
			t.Logf("%s: %d jobs over %d keys, limit %d per key, 3 processes: %d samples, max running per key %d, max running+available per key %d, jobs made available again by liveness %d",
				tt.name, total, keys, maxPerKey, ks.samples, ks.maxRunning, ks.maxHolding, rescued)
			if tt.kill {
				require.True(t, killed, "w0 never had three jobs running to be killed with")
				require.Positive(t, rescued, "the killed process held jobs that ran again")
			}
		})
	}
}

// TestReplicasKeepRateLimit runs three worker processes over a rate limit
// of 100 starts a second, all keys together, where every tenth job weighs
// 5: after every job completed, no one-second window of starts (each
// window beginning at a start, and the fixed seconds printed) holds more
// than 100 by weight.
func TestReplicasKeepRateLimit(t *testing.T) {
	t.Parallel()
	const (
		rate  = 100
		jobs  = 400
		heavy = 5
	)
	bin := buildLimitWorker(t)
	db := pgtest.New(t)
	ctx := context.Background()
	for i := range 3 {
		startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), fmt.Sprintf("LIMIT_RATE=%d", rate))
	}
	items, total := weightedItems(jobs, replica.Args{Key: "k", MS: 2}, heavy, nil)
	enqueueLimited(t, db, replica.RateLimit(rate), items)
	pgtest.WaitFor(t, 3*time.Minute, "every job completed", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE state = 'completed'`)).Scan(&n)
		return n == jobs, err
	})

	rows, err := db.Pool.Query(ctx, db.Q(`
SELECT attempted_at, coalesce((metadata ->> 'tributary_limit_weight')::int, 1), attempt
FROM /*schema*/river_job ORDER BY attempted_at`))
	require.NoError(t, err)
	var starts []start
	for rows.Next() {
		var s start
		var attempt int
		require.NoError(t, rows.Scan(&s.at, &s.weight, &attempt))
		require.Equal(t, 1, attempt, "no job ran twice: every start is its attempted_at")
		starts = append(starts, s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, starts, jobs)

	busiest, busiestAt := busiestWindow(starts, time.Second)
	first := starts[0].at
	fixed := perPeriod(starts, time.Second)
	span := starts[len(starts)-1].at.Sub(first)
	t.Logf("rate %d/s over 3 processes: %d jobs weighing %d started in %s; weighted starts per second from the first: %v; busiest one-second window %d (from %s)",
		rate, jobs, total, span.Round(time.Millisecond), fixed, busiest, busiestAt.Format("15:04:05.000"))
	require.LessOrEqual(t, busiest, rate, "a one-second window held more than %d by weight", rate)
}

// TestReplicasServeKeysRoundRobin: tenant A queues 20,000 jobs, tenant B
// 20 after them, under a limit of 20 at once over all tenants, served
// round-robin, with three worker processes: every B job starts before a
// tenth of A's backlog has started.
func TestReplicasServeKeysRoundRobin(t *testing.T) {
	t.Parallel()
	const (
		total = 20
		aJobs = 20000
		bJobs = 20
	)
	bin := buildLimitWorker(t)
	db := pgtest.New(t)
	ctx := context.Background()
	for i := range 3 {
		startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), fmt.Sprintf("LIMIT_TOTAL=%d", total))
	}
	items := make([]queue.EnqueueItem, aJobs)
	for i := range items {
		items[i] = queue.EnqueueItem{Args: replica.Args{Key: "tenant-a", MS: 1}}
	}
	enqueueLimited(t, db, replica.FairLimit(total), items)
	items = make([]queue.EnqueueItem, bJobs)
	for i := range items {
		items[i] = queue.EnqueueItem{Args: replica.Args{Key: "tenant-b", MS: 1}}
	}
	enqueueLimited(t, db, replica.FairLimit(total), items)

	pgtest.WaitFor(t, 3*time.Minute, "every job of tenant B started", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job
WHERE args ->> 'key' = 'tenant-b' AND attempted_at IS NOT NULL`)).Scan(&n)
		return n == bJobs, err
	})
	var aStarted, aDone int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
WITH last_b AS (SELECT max(attempted_at) AS at FROM /*schema*/river_job WHERE args ->> 'key' = 'tenant-b')
SELECT count(*) FILTER (WHERE attempted_at <= last_b.at), count(*) FILTER (WHERE finalized_at <= last_b.at)
FROM /*schema*/river_job, last_b WHERE args ->> 'key' = 'tenant-a'`)).Scan(&aStarted, &aDone))
	t.Logf("fairness: tenant A %d queued, tenant B %d after them, %d at once over all tenants, 3 processes: when B's last job started, A had %d started (%.2f%% of its backlog) and %d completed",
		aJobs, bJobs, total, aStarted, 100*float64(aStarted)/aJobs, aDone)
	require.Less(t, aStarted, aJobs/10, "tenant B waited behind a tenth of tenant A's backlog")
}

// weightedItems returns n jobs like args, every tenth weighing heavy and
// the others 1, inserted with opts, and their total weight.
func weightedItems(n int, args replica.Args, heavy int, opts *queue.EnqueueOpts) ([]queue.EnqueueItem, int) {
	items := make([]queue.EnqueueItem, n)
	total := 0
	for i := range items {
		args.Weight = 1
		if i%10 == 0 {
			args.Weight = heavy
		}
		total += args.Weight
		items[i] = queue.EnqueueItem{Args: args, Opts: opts}
	}
	return items, total
}

// start is one start of a rate-limited job: its attempt's attempted_at
// (the database clock, as admission counts it) and its weight.
type start struct {
	at     time.Time
	weight int
}

// busiestWindow returns the most weight a window of period holds, and
// where it begins: of the windows beginning at a start (starts in order),
// which bound every window.
func busiestWindow(starts []start, period time.Duration) (busiest int, at time.Time) {
	for i, s := range starts {
		sum := 0
		for _, o := range starts[i:] {
			if o.at.Sub(s.at) >= period {
				break
			}
			sum += o.weight
		}
		if sum > busiest {
			busiest, at = sum, s.at
		}
	}
	return busiest, at
}

// perPeriod describes the weight and the number of starts in each fixed
// period from the first start (starts in order).
func perPeriod(starts []start, period time.Duration) []string {
	if len(starts) == 0 {
		return nil
	}
	first, last := starts[0].at, starts[len(starts)-1].at
	var fixed []string
	for w := 0; !first.Add(time.Duration(w) * period).After(last); w++ {
		lo, hi := first.Add(time.Duration(w)*period), first.Add(time.Duration(w+1)*period)
		sum, n := 0, 0
		for _, s := range starts {
			if !s.at.Before(lo) && s.at.Before(hi) {
				sum += s.weight
				n++
			}
		}
		fixed = append(fixed, fmt.Sprintf("%d (%d jobs)", sum, n))
	}
	return fixed
}

// runningUnderPID counts the running jobs attempted last by the worker
// process with pid (its River client id holds its pid).
// rescuedFrom counts the jobs with an attempt under process pid that
// liveness took back (its rescue records an error).
func rescuedFrom(t *testing.T, db *pgtest.DB, pid int) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
SELECT count(*) FROM /*schema*/river_job
WHERE errors IS NOT NULL AND EXISTS (SELECT FROM unnest(attempted_by) AS a WHERE a LIKE '%-' || $1::text || '-%')`), fmt.Sprint(pid)).Scan(&n))
	return n
}

func runningUnderPID(t *testing.T, db *pgtest.DB, pid string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
SELECT count(*) FROM /*schema*/river_job
WHERE state = 'running' AND attempted_by[cardinality(attempted_by)] LIKE '%-' || $1::text || '-%'`), pid).Scan(&n))
	return n
}

// keySampler samples the keys of replica.Limit (sampleReplica), keeps the
// most any sample saw, and fails the test at a sample with a key over
// limit.
type keySampler struct {
	limit                           int
	samples, maxRunning, maxHolding int
}

// sample takes one sample and returns how many jobs have completed.
func (s *keySampler) sample(t *testing.T, db *pgtest.DB) (completed int) {
	t.Helper()
	running, holding, completed := sampleReplica(t, db)
	s.samples++
	s.maxRunning, s.maxHolding = max(s.maxRunning, running), max(s.maxHolding, holding)
	require.LessOrEqual(t, running, s.limit, "a key had more than %d jobs running (sample %d)", s.limit, s.samples)
	require.LessOrEqual(t, holding, s.limit, "a key had more than %d jobs running or available (sample %d)", s.limit, s.samples)
	return completed
}

// sampleReplica reads, in one snapshot, the most jobs any key has running,
// the most any key has running or available, and how many completed.
func sampleReplica(t *testing.T, db *pgtest.DB) (running, holding, completed int) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), db.Q(`
WITH per_key AS (
    SELECT metadata ->> 'tributary_limit_key' AS key,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state IN ('running', 'available')) AS holding
    FROM /*schema*/river_job
    WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = 'replica-per-key'
      AND state IN ('pending', 'available', 'running')
    GROUP BY 1
)
SELECT coalesce((SELECT max(running) FROM per_key), 0)::int, coalesce((SELECT max(holding) FROM per_key), 0)::int,
       (SELECT count(*) FROM /*schema*/river_job WHERE state = 'completed')::int`)).Scan(&running, &holding, &completed)
	require.NoError(t, err)
	return running, holding, completed
}

// insertReplicaJobs inserts the jobs, keys interleaved, through a runtime
// that is never started (as a process that only enqueues does), so the
// limit's insert middleware marks them.
func insertReplicaJobs(t *testing.T, db *pgtest.DB, maxPerKey, keys, perKey, workMS int) {
	t.Helper()
	items := make([]queue.EnqueueItem, 0, keys*perKey)
	for range perKey {
		for k := range keys {
			items = append(items, queue.EnqueueItem{Args: replica.Args{Key: fmt.Sprintf("key-%02d", k), MS: workMS}})
		}
	}
	enqueueLimited(t, db, replica.Limit(maxPerKey), items)
}

// enqueueLimited inserts items through a runtime that is never started (as
// a process that only enqueues does) and declares limit, so the limits'
// insert middleware marks them.
func enqueueLimited(t *testing.T, db *pgtest.DB, limit limits.Limit, items []queue.EnqueueItem) {
	t.Helper()
	lim, err := limits.New(limits.Config{Limits: []limits.Limit{limit}, Schema: db.Schema})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{
		Schema: db.Schema, Logger: pgtest.Logger(t), Middleware: []rivertype.Middleware{lim.Middleware()},
		RiverConfigFunc: func(c *river.Config) { c.SkipUnknownJobCheck = true },
	})
	require.NoError(t, err)
	n, err := rt.EnqueueMany(context.Background(), items)
	require.NoError(t, err)
	require.Equal(t, len(items), n)
}

func buildLimitWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "limitworker")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/testproc/limitworker").CombinedOutput()
	require.NoError(t, err, "building the limit worker: %s", out)
	return bin
}

// startLimitWorker starts one worker process on the test's schema, with
// more workers than the limit leaves room for; it is stopped with SIGTERM
// when the test ends.
func startLimitWorker(t *testing.T, bin string, db *pgtest.DB, name string, limitEnv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin)
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.URLWithPoolMax(8),
		"TRIBUTARY_SCHEMA="+db.Schema,
		"WORKERS=30",
		"LIVENESS_TIMEOUT=2s",
	)
	cmd.Env = append(cmd.Env, limitEnv...)
	stderr := &pgtest.SyncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("worker %s stderr:\n%s", name, stderr.String())
		}
	})
	return cmd
}
