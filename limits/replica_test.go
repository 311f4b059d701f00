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
				procs[i] = startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), maxPerKey)
			}
			insertReplicaJobs(t, db, maxPerKey, keys, perKey, workMS)
			total := keys * perKey

			killed := !tt.kill
			var samples, maxRunning, maxHolding int
			deadline := time.Now().Add(3 * time.Minute)
			for {
				running, holding, done := sampleReplica(t, db)
				samples++
				maxRunning, maxHolding = max(maxRunning, running), max(maxHolding, holding)
				require.LessOrEqual(t, running, maxPerKey, "a key had more than %d jobs running (sample %d)", maxPerKey, samples)
				require.LessOrEqual(t, holding, maxPerKey, "a key had more than %d jobs running or available (sample %d)", maxPerKey, samples)
				if done == total {
					break
				}
				if !killed && done >= total/3 {
					if held := runningUnderPID(t, db, fmt.Sprint(procs[0].Process.Pid)); held > 0 {
						require.NoError(t, procs[0].Process.Signal(syscall.SIGKILL))
						killed = true
						t.Logf("SIGKILLed w0 after %d of %d jobs completed, holding %d running jobs", done, total, held)
					}
				}
				require.True(t, time.Now().Before(deadline), "only %d of %d jobs completed", done, total)
			}
			var rescued int
			require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE errors IS NOT NULL`)).Scan(&rescued))
			t.Logf("%s: %d jobs over %d keys, limit %d per key, 3 processes: %d samples, max running per key %d, max running+available per key %d, jobs made available again by liveness %d",
				tt.name, total, keys, maxPerKey, samples, maxRunning, maxHolding, rescued)
			if tt.kill {
				require.Positive(t, rescued, "the killed process held jobs that ran again")
			}
		})
	}
}

// runningUnderPID counts the running jobs attempted last by the worker
// process with pid (its River client id holds its pid).
func runningUnderPID(t *testing.T, db *pgtest.DB, pid string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
SELECT count(*) FROM /*schema*/river_job
WHERE state = 'running' AND attempted_by[cardinality(attempted_by)] LIKE '%-' || $1::text || '-%'`), pid).Scan(&n))
	return n
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
	lim, err := limits.New(limits.Config{Limits: []limits.Limit{replica.Limit(maxPerKey)}, Schema: db.Schema})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{
		Schema: db.Schema, Logger: pgtest.Logger(t), Middleware: []rivertype.Middleware{lim.Middleware()},
		RiverConfigFunc: func(c *river.Config) { c.SkipUnknownJobCheck = true },
	})
	require.NoError(t, err)
	items := make([]queue.EnqueueItem, 0, keys*perKey)
	for range perKey {
		for k := range keys {
			items = append(items, queue.EnqueueItem{Args: replica.Args{Key: fmt.Sprintf("key-%02d", k), MS: workMS}})
		}
	}
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
func startLimitWorker(t *testing.T, bin string, db *pgtest.DB, name string, maxPerKey int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin)
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.URLWithPoolMax(8),
		"TRIBUTARY_SCHEMA="+db.Schema,
		fmt.Sprintf("LIMIT_MAX=%d", maxPerKey),
		"WORKERS=30",
		"LIVENESS_TIMEOUT=2s",
	)
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
