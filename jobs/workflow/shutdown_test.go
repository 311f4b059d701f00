package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestShutdownInterruptsWithoutFailing: a task on its only attempt that is
// cancelled by the runtime's hard stop is not failed (the runtime's own
// middleware, inside the coordinator's, makes it a snooze), and another
// process finishes it.
func TestShutdownInterruptsWithoutFailing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	start := func() (*queue.Runtime, *stepWorker) {
		coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
		require.NoError(t, err)
		w := newStepWorker()
		rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{ShutdownTimeout: 100 * time.Millisecond,
			Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
			queue.AddWorker(rt, w)
			require.NoError(t, coord.Register(rt))
		})
		return rt, w
	}
	rt1, w1 := start()
	client := workflow.NewClient(rt1.Client)
	wf := workflow.New("w", nil)
	wf.Add("a", stepArgs{Name: "a", Wait: true}, once())
	wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	select {
	case <-w1.started:
	case <-time.After(30 * time.Second):
		t.Fatal("a never started")
	}
	require.NoError(t, rt1.Stop(ctx))

	d, err := client.Get(ctx, res.ID)
	require.NoError(t, err)
	a := taskByName(t, d, "a")
	require.Equal(t, workflow.TaskActive, a.State, "interrupted, not failed")
	require.Equal(t, rivertype.JobStateAvailable, a.JobState)
	require.Equal(t, workflow.StatusRunning, d.Status)

	_, w2 := start()
	w2.Release("a")
	d = (&testBundle{client: client}).waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, 1, taskByName(t, d, "a").Attempts, "the interrupted attempt was not counted")
	require.Len(t, w2.Starts("b"), 1)
}
