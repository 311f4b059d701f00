package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestLivenessDatabaseLost cuts a worker process off its database while it
// runs a job. The process must stop the job before another process may take
// it for dead, and the other process then runs the job: the two attempts
// never overlap.
func TestLivenessDatabaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Long enough that a loaded machine does not stop the survivor too.
	const timeout = 6 * time.Second
	db := pgtest.New(t)
	log := newHoldLog()

	proxy, cutOff := pgtest.ThroughCutProxy(t, db)
	cutOffPool := cutOff.Pool

	victim, err := queue.NewRuntime(cutOffPool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), LivenessTimeout: timeout,
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond, Queues: map[string]int{"default": 2}})
	require.NoError(t, err)
	queue.AddWorker(victim, &holdWorker{process: victim.ProcessID(), log: log})
	require.NoError(t, victim.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = victim.Stop(stopCtx)
	})

	res, err := victim.Enqueue(ctx, holdArgs{Key: "cut", MS: 50, HoldOn: victim.ProcessID()}, nil)
	require.NoError(t, err)
	first := waitStarted(t, log, 10*time.Second)
	require.Equal(t, victim.ProcessID(), first.process)
	survivor := startHoldRuntime(t, db, queue.RuntimeConfig{LivenessTimeout: timeout}, log)

	cutAt := time.Now()
	proxy.Cut()

	second := waitStarted(t, log, 3*timeout)
	require.Equal(t, survivor.ProcessID(), second.process)
	select {
	case <-victim.LivenessLost():
	case <-time.After(30 * time.Second):
		t.Fatal("the process cut off its database did not stop")
	}
	db.WaitForJobState(t, res.Job.ID, rivertype.JobStateCompleted, 10*time.Second)

	var victimRun holdRun
	for _, r := range log.all() {
		if r.process == victim.ProcessID() {
			victimRun = r
		}
	}
	require.ErrorIs(t, victimRun.cause, queue.ErrLivenessLost)
	stoppedAfter := victimRun.end.Sub(cutAt)
	tookOverAfter := second.start.Sub(cutAt)
	t.Logf("after the cut: the victim stopped its job in %s, the survivor started it in %s", stoppedAfter.Round(time.Millisecond), tookOverAfter.Round(time.Millisecond))
	require.Less(t, stoppedAfter, timeout, "the victim stops within the liveness timeout of its last heartbeat")
	require.True(t, victimRun.end.Before(second.start), "the attempts overlapped: the victim stopped at %s, the survivor started at %s", victimRun.end, second.start)

	j := readJob(t, db, res.Job.ID)
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, []string{victim.ProcessID(), survivor.ProcessID()}, j.AttemptedBy)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Error, victim.ProcessID())
}

// TestLostJobClockWaitsForTheDatabase: a job running under a live process
// that nothing in it runs is made available again only after the process
// reached its database for lostJobAfter (20 s) on end. While the database
// is away, River's completer may hold the job's end; the clock starts again
// once it is back.
func TestLostJobClockWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	proxy, cutOff := pgtest.ThroughCutProxy(t, db)
	pool := cutOff.Pool
	// The default timeout: heartbeats every 5 s, the fence after 25 s
	// without one, well past the cut below.
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t),
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond, Queues: map[string]int{"default": 2}})
	require.NoError(t, err)
	queue.AddWorker(rt, &holdWorker{process: rt.ProcessID(), log: newHoldLog()})
	require.NoError(t, rt.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = rt.Stop(stopCtx)
	})

	// A job this process fetched and never got: running under its id, an
	// hour old, run by nothing in it.
	lost, err := rt.Client.Enqueue(ctx, holdArgs{Key: "lost", MS: 1}, &queue.EnqueueOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`
UPDATE /*schema*/river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour',
    attempted_by = ARRAY[$2::text], scheduled_at = now() - interval '1 hour'
WHERE id = $1`), lost.Job.ID, rt.ProcessID())
	require.NoError(t, err)
	setAt := time.Now()

	// A look (one every 5 s) has seen it by 6 s; without the database from
	// 6 s to 18 s, at least two heartbeats fail. A clock that ignored the
	// cut would take the job for lost by 25 s (first seen by 5 s, plus
	// 20 s); this one starts at the first look after 18 s.
	time.Sleep(time.Until(setAt.Add(6 * time.Second))) // the fault's timing, not a synchronisation
	proxy.Cut()
	time.Sleep(time.Until(setAt.Add(18 * time.Second)))
	proxy.Restore()
	time.Sleep(time.Until(setAt.Add(32 * time.Second)))
	j := readJob(t, db, lost.Job.ID)
	require.Equal(t, "running", j.State, "taken for lost less than 20 s after the database came back")
	require.Equal(t, 1, j.Attempt)

	pgtest.WaitFor(t, 60*time.Second, "the lost job runs again and completes", func() (bool, error) {
		return readJob(t, db, lost.Job.ID).State == "completed", nil
	})
	require.Equal(t, 2, readJob(t, db, lost.Job.ID).Attempt)
	select {
	case <-rt.LivenessLost():
		t.Fatal("the process lost its liveness during a 12 s cut with a 30 s liveness timeout")
	default:
	}
}
