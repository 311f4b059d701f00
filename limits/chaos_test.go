//go:build chaos

package limits_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/limits/internal/replica"
	"github.com/tributary-run/tributary/queue"
)

// TestChaosLimitsSIGKILL is the long run of the limits (`make chaos`):
// three worker processes declare two limits that bind throughout, 2
// running per key over 20 keys (5,000 jobs of 200 ms) and 50 starts a
// second over the jobs of another queue (1,500 jobs of 200 ms, every tenth
// weighing 5), while a process is SIGKILLed every 3 s and started again,
// ten times: one chosen at random among those with jobs running. The running jobs of every key are sampled
// until every job completed, and a trigger records every start (each
// attempt's attempted_at, as admission counts it): every inserted job
// completes, no sample has a key with more than 2 running (or running and
// available), and no one-second window of starts holds more than 50 by
// weight. A job started again after its process was killed is counted
// (at least once is the guarantee), not failed.
func TestChaosLimitsSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		procs     = 3
		maxPerKey = 2
		keys      = 20
		perKey    = 250
		keyMS     = 200
		rate      = 50
		rated     = 1500
		ratedMS   = 200
		heavy     = 5
		kills     = 10
		killEvery = 3 * time.Second
	)
	bin := buildLimitWorker(t)
	db := pgtest.New(t)
	ctx := context.Background()
	recordStarts(t, db)

	env := []string{fmt.Sprintf("LIMIT_MAX=%d", maxPerKey), fmt.Sprintf("LIMIT_QUEUE_RATE=%d", rate)}
	workers := make([]*exec.Cmd, procs)
	for i := range workers {
		workers[i] = startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), env...)
	}
	insertReplicaJobs(t, db, maxPerKey, keys, perKey, keyMS)
	items, weight := weightedItems(rated, replica.Args{Key: "rated", MS: ratedMS}, heavy, &queue.EnqueueOpts{Queue: replica.RatedQueue})
	enqueueLimited(t, db, replica.QueueRateLimit(rate), items)
	var ids []int64
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT array_agg(id) FROM /*schema*/river_job`)).Scan(&ids))
	total := keys*perKey + rated
	require.Len(t, ids, total)

	began := time.Now()
	nextKill, lastKill := began.Add(killEvery), began
	killed, ks := 0, keySampler{limit: maxPerKey}
	deadline := began.Add(20 * time.Minute)
	for {
		done := ks.sample(t, db)
		if done == total {
			break
		}
		if killed < kills && time.Now().After(nextKill) {
			held := make([]int, procs)
			var busy []int
			for i, w := range workers {
				if held[i] = runningUnderPID(t, db, fmt.Sprint(w.Process.Pid)); held[i] > 0 {
					busy = append(busy, i)
				}
			}
			i := rand.IntN(procs)
			if len(busy) > 0 {
				i = busy[rand.IntN(len(busy))]
			}
			require.NoError(t, workers[i].Process.Signal(syscall.SIGKILL))
			killed++
			lastKill = time.Now()
			nextKill = lastKill.Add(killEvery)
			t.Logf("SIGKILLed w%d (kill %d of %d) at %s with %d jobs running a moment before; %d of %d jobs completed",
				i, killed, kills, lastKill.Sub(began).Round(time.Millisecond), held[i], done, total)
			workers[i] = startLimitWorker(t, bin, db, fmt.Sprintf("w%d", i), env...)
		}
		require.True(t, time.Now().Before(deadline), "only %d of %d jobs completed", done, total)
	}
	drained := time.Since(lastKill)
	require.Equal(t, kills, killed, "every job completed before the last kill: the run is too short to show anything")

	var completed int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT count(*) FROM /*schema*/river_job WHERE id = ANY($1) AND state = 'completed'`), ids).Scan(&completed))
	lost := total - completed
	var startsN, startedJobs, duplicates, rescued int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT (SELECT count(*) FROM /*schema*/chaos_start)::int,
       (SELECT count(DISTINCT job_id) FROM /*schema*/chaos_start)::int,
       (SELECT count(*) FROM (SELECT job_id FROM /*schema*/chaos_start GROUP BY 1 HAVING count(*) > 1) d)::int,
       (SELECT count(*) FROM /*schema*/river_job WHERE errors IS NOT NULL)::int`)).Scan(&startsN, &startedJobs, &duplicates, &rescued))

	rows, err := db.Pool.Query(ctx, db.Q(`
SELECT attempted_at, weight FROM /*schema*/chaos_start WHERE limit_name = $1 ORDER BY attempted_at`), replica.QueueRateLimit(rate).Name)
	require.NoError(t, err)
	var starts []start
	for rows.Next() {
		var s start
		require.NoError(t, rows.Scan(&s.at, &s.weight))
		starts = append(starts, s)
	}
	require.NoError(t, rows.Err())
	busiest, busiestAt := busiestWindow(starts, time.Second)
	windows := perPeriod(starts, time.Second)
	var pause time.Duration
	for i := 1; i < len(starts); i++ {
		pause = max(pause, starts[i].at.Sub(starts[i-1].at))
	}

	t.Logf("rate %d/s: %d starts of %d jobs weighing %d; weighted starts per second from the first: %v; busiest one-second window %d (from %s); longest pause between starts %s",
		rate, len(starts), rated, weight, windows, busiest, busiestAt.Format("15:04:05.000"), pause.Round(time.Millisecond))
	t.Logf("chaos: limits SIGKILL: %d kills, %d jobs, lost %d, max running per key %d (running or available %d, limit %d) over %d samples, busiest 1-s window %d of %d windows (limit %d), %d starts, duplicates %d (jobs started more than once), %d rescued, drained in %.1f s",
		killed, total, lost, ks.maxRunning, ks.maxHolding, maxPerKey, ks.samples, busiest, len(windows), rate, startsN, duplicates, rescued, drained.Seconds())
	require.Zero(t, lost, "every inserted job completed")
	require.Equal(t, total, startedJobs, "every job's start was recorded")
	require.Positive(t, rescued, "the killed processes held jobs that ran again")
	require.LessOrEqual(t, busiest, rate, "a one-second window held more than %d by weight", rate)
}

// recordStarts makes every start of a job (its move to running by River's
// fetch, committed with it) leave a row in chaos_start: the job, its
// attempt, its attempted_at, its limit and its weight. A process killed
// before its fetch commits leaves none, and started nothing.
func recordStarts(t *testing.T, db *pgtest.DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`
CREATE TABLE /*schema*/chaos_start (
    job_id       bigint      NOT NULL,
    attempt      integer     NOT NULL,
    limit_name   text        NOT NULL,
    attempted_at timestamptz NOT NULL,
    weight       integer     NOT NULL
);
CREATE FUNCTION /*schema*/chaos_record_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /*schema*/chaos_start VALUES (NEW.id, NEW.attempt, NEW.metadata ->> 'tributary_limit', NEW.attempted_at,
        coalesce((NEW.metadata ->> 'tributary_limit_weight')::int, 1));
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_record_start AFTER UPDATE OF state ON /*schema*/river_job
    FOR EACH ROW WHEN (NEW.state = 'running' AND OLD.state <> 'running')
    EXECUTE FUNCTION /*schema*/chaos_record_start();`))
	require.NoError(t, err)
}
