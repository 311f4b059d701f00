package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// startThroughCutProxy starts a runtime with a coordinator on a fresh
// schema whose connections go through a cut proxy (stored in *proxy before
// any job runs) and returns a client that does not.
func startThroughCutProxy(t *testing.T, proxy **pgtest.CutProxy, register func(rt *queue.Runtime)) *workflow.Client {
	t.Helper()
	db := pgtest.New(t)
	p, via := pgtest.ThroughCutProxy(t, db)
	*proxy = p
	coord, err := workflow.NewCoordinator(via.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	pgtest.StartRuntime(t, via, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		register(rt)
		require.NoError(t, coord.Register(rt))
	})
	return workflow.NewClient(db.Client(t))
}

// TestTaskCompletionLosesConnection: a task succeeded and the database
// connection failed while its completion was recorded. That is not the
// task's failure: it runs again without spending an attempt (the old code
// failed the attempt, so a burst of terminated sessions could fail a
// workflow whose tasks never failed).
func TestTaskCompletionLosesConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := &cutWorker{}
	client := startThroughCutProxy(t, &w.proxy, func(rt *queue.Runtime) { queue.AddWorker(rt, w) })

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

type cutRecordArgs struct {
	Record string `json:"record"` // step, steptx, sleep, signal, output
}

func (cutRecordArgs) Kind() string { return "test.cut_record" }

// cutRecordWorker cuts its process's database connections for a moment in
// its first call, just before tributary records one of the task's steps.
type cutRecordWorker struct {
	river.WorkerDefaults[cutRecordArgs]
	proxy *pgtest.CutProxy
	calls atomic.Int32
	fns   atomic.Int32 // runs of the step's function
}

func (w *cutRecordWorker) Work(ctx context.Context, job *river.Job[cutRecordArgs]) error {
	first := w.calls.Add(1) == 1
	cut := func() {
		if first {
			w.proxy.Cut()
			time.AfterFunc(300*time.Millisecond, w.proxy.Restore)
		}
	}
	// The run's steps are read at its first step: read them first, so
	// that the cut hits the record itself.
	if _, err := workflow.Step(ctx, "pre", func(context.Context) (int, error) { return 0, nil }); err != nil {
		return err
	}
	var err error
	switch job.Args.Record {
	case "step":
		_, err = workflow.Step(ctx, "s", func(context.Context) (int, error) {
			w.fns.Add(1)
			cut() // the function succeeded; its record is what fails
			return 1, nil
		})
	case "steptx":
		_, err = workflow.StepTx(ctx, "s", func(context.Context, pgx.Tx) (int, error) {
			w.fns.Add(1)
			cut() // the step's end and COMMIT are what fail
			return 1, nil
		})
	case "sleep":
		cut()
		err = workflow.Sleep(ctx, "nap", time.Millisecond)
	case "signal":
		cut()
		_, err = workflow.AwaitSignal[int](ctx, "go", time.Millisecond)
		if errors.Is(err, workflow.ErrSignalTimeout) {
			err = nil
		}
	case "output":
		cut()
		_, err = workflow.Output[int](ctx, "a")
	}
	return err
}

type outArgs struct{}

func (outArgs) Kind() string { return "test.cut_record_output" }

type outWorker struct{ river.WorkerDefaults[outArgs] }

func (outWorker) Work(ctx context.Context, _ *river.Job[outArgs]) error {
	return workflow.SetOutput(ctx, 7)
}

// TestTaskRecordLosesConnection: the database connection failed while
// tributary wrote or read a task's own records (a step's, a transactional
// step's, a sleep's, a signal wait's, its dependency's output) and the
// task returned that error, as the docs tell it to. That is not the task's
// failure: with a single attempt allowed, the task runs again (snoozed, no
// attempt spent) and its workflow completes. The old code spent the
// attempt, so the workflow failed.
func TestTaskRecordLosesConnection(t *testing.T) {
	t.Parallel()
	for _, record := range []string{"step", "steptx", "sleep", "signal", "output"} {
		t.Run(record, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := &cutRecordWorker{}
			client := startThroughCutProxy(t, &w.proxy, func(rt *queue.Runtime) {
				queue.AddWorker(rt, w)
				queue.AddWorker(rt, outWorker{})
			})

			wf := workflow.New("cut-"+record, nil)
			wf.Add("a", outArgs{}, nil)
			wf.Add("t", cutRecordArgs{Record: record}, &workflow.TaskOpts{Deps: []string{"a"}, InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
			res, err := client.Insert(ctx, wf)
			require.NoError(t, err)
			var d *workflow.Details
			pgtest.WaitFor(t, 60*time.Second, "the workflow finishes", func() (bool, error) {
				var err error
				d, err = client.Get(ctx, res.ID)
				return err == nil && d.Status != workflow.StatusRunning, err
			})
			var task workflow.TaskInfo
			for _, ti := range d.Tasks {
				if ti.Name == "t" {
					task = ti
				}
			}
			require.Equal(t, workflow.StatusCompleted, d.Status, "task t's errors: %v", task.Errors)
			require.Equal(t, 1, task.Attempts)
			require.Empty(t, task.Errors)
			require.GreaterOrEqual(t, w.calls.Load(), int32(2), "cut in its first run, run again")
			if record == "step" {
				require.EqualValues(t, 2, w.fns.Load(), "a Step whose record was lost runs again (at-least-once)")
			}
			if record == "steptx" {
				require.EqualValues(t, 2, w.fns.Load(), "a StepTx whose commit was lost runs again, its writes rolled back")
			}
		})
	}
}
