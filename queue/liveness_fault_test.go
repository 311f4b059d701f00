package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

	proxy := pgtest.NewCutProxy(t, db.URL)
	pcfg, err := pgxpool.ParseConfig(proxy.URL())
	require.NoError(t, err)
	pcfg.ConnConfig.ConnectTimeout = time.Second
	pcfg.MaxConns = 4
	cutOffPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(cutOffPool.Close)

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
