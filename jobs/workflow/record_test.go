package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type cutArgs struct{}

func (cutArgs) Kind() string { return "test.cut_once" }

// cutWorker cuts its process's database connections for a moment at the
// end of its first call, after its work succeeded.
type cutWorker struct {
	river.WorkerDefaults[cutArgs]
	proxy *pgtest.CutProxy
	calls atomic.Int32
}

func (w *cutWorker) Work(ctx context.Context, job *river.Job[cutArgs]) error {
	if w.calls.Add(1) == 1 {
		w.proxy.Cut()
		time.AfterFunc(300*time.Millisecond, w.proxy.Restore)
	}
	return nil
}

// TestTaskCompletionLosesConnection: a task succeeded and the database
// connection failed while its completion was recorded. That is not the
// task's failure: it runs again without spending an attempt (the old code
// failed the attempt, so a burst of terminated sessions could fail a
// workflow whose tasks never failed).
func TestTaskCompletionLosesConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	proxy, via := pgtest.ThroughCutProxy(t, db)

	coord, err := workflow.NewCoordinator(via.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	w := &cutWorker{proxy: proxy}
	pgtest.StartRuntime(t, via, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, w)
		require.NoError(t, coord.Register(rt))
	})
	client := workflow.NewClient(db.Client(t)) // not through the proxy

	wf := workflow.New("cut", nil)
	wf.Add("cut", cutArgs{}, nil)
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	var d *workflow.Details
	pgtest.WaitFor(t, 60*time.Second, "the workflow completes", func() (bool, error) {
		var err error
		d, err = client.Get(ctx, res.ID)
		return err == nil && d.Status == workflow.StatusCompleted, err
	})
	task := d.Tasks[0]
	require.Equal(t, 1, task.Attempts, "the completion lost its connection: no attempt spent (errors %v)", task.Errors)
	require.Empty(t, task.Errors)
	require.EqualValues(t, 2, w.calls.Load(), "done, not recorded, done again (at-least-once)")
}
