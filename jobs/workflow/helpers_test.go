package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// stepArgs is the test task: it records its start, can fail, cancel
// itself, panic or wait, reads the outputs it is told to and outputs what it
// read.
type stepArgs struct {
	Name         string   `json:"name"`
	FailAttempts int      `json:"fail_attempts,omitempty"` // fail the first N attempts
	Cancel       bool     `json:"cancel,omitempty"`        // return river.JobCancel
	Panic        bool     `json:"panic,omitempty"`
	Wait         bool     `json:"wait,omitempty"` // block until released or cancelled
	Read         []string `json:"read,omitempty"` // outputs to read
	NoOutput     bool     `json:"no_output,omitempty"`
	RiverOutput  bool     `json:"river_output,omitempty"` // also river.RecordOutput
}

func (stepArgs) Kind() string { return "wftest.step" }

// stepOutput is what a step outputs.
type stepOutput struct {
	Task    string                     `json:"task"`
	Attempt int                        `json:"attempt"`
	Read    map[string]json.RawMessage `json:"read,omitempty"`
	Missing map[string]string          `json:"missing,omitempty"` // task -> error of Output
}

type stepWorker struct {
	river.WorkerDefaults[stepArgs]

	mu      sync.Mutex
	starts  map[string][]time.Time
	release map[string]chan struct{}
	failing map[string]bool
	started chan string
}

func newStepWorker() *stepWorker {
	return &stepWorker{starts: map[string][]time.Time{}, release: map[string]chan struct{}{}, failing: map[string]bool{},
		started: make(chan string, 100_000)}
}

func (w *stepWorker) NextRetry(*river.Job[stepArgs]) time.Time {
	return time.Now().Add(10 * time.Millisecond)
}

func (w *stepWorker) releaseCh(name string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.release[name]
	if ch == nil {
		ch = make(chan struct{})
		w.release[name] = ch
	}
	return ch
}

// SetFailing makes every attempt of the named steps fail (or not).
func (w *stepWorker) SetFailing(fail bool, names ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range names {
		w.failing[n] = fail
	}
}

// Release lets a waiting step finish.
func (w *stepWorker) Release(name string) { close(w.releaseCh(name)) }

func (w *stepWorker) Starts(name string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.starts[name]...)
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[stepArgs]) error {
	a := job.Args
	w.mu.Lock()
	w.starts[a.Name] = append(w.starts[a.Name], time.Now())
	failing := w.failing[a.Name]
	w.mu.Unlock()
	w.started <- a.Name
	if a.Wait {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.releaseCh(a.Name):
		}
	}
	if a.Panic {
		panic("step " + a.Name + " panics")
	}
	if failing {
		return fmt.Errorf("step %s is failing", a.Name)
	}
	if job.Attempt <= a.FailAttempts {
		return fmt.Errorf("step %s fails attempt %d", a.Name, job.Attempt)
	}
	if a.Cancel {
		return river.JobCancel(errors.New("step " + a.Name + " gives up"))
	}
	out := stepOutput{Task: a.Name, Attempt: job.Attempt}
	for _, r := range a.Read {
		raw, err := workflow.OutputJSON(ctx, r)
		if err != nil {
			if out.Missing == nil {
				out.Missing = map[string]string{}
			}
			out.Missing[r] = err.Error()
			continue
		}
		if out.Read == nil {
			out.Read = map[string]json.RawMessage{}
		}
		out.Read[r] = raw
	}
	if a.RiverOutput {
		if err := river.RecordOutput(ctx, a.Name); err != nil {
			return err
		}
	}
	if a.NoOutput {
		return nil
	}
	return workflow.SetOutput(ctx, out)
}

type testBundle struct {
	db     *pgtest.DB
	client *workflow.Client
	coord  *workflow.Coordinator
	rt     *queue.Runtime
	worker *stepWorker
}

// setup starts a runtime with the coordinator and the step worker on a
// fresh schema.
func setup(t *testing.T) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	return setupOn(t, db, workflow.CoordinatorConfig{})
}

func setupOn(t *testing.T, db *pgtest.DB, ccfg workflow.CoordinatorConfig) *testBundle {
	t.Helper()
	ccfg.Schema = db.Schema
	ccfg.Logger = pgtest.Logger(t)
	coord, err := workflow.NewCoordinator(db.Pool, ccfg)
	require.NoError(t, err)
	w := newStepWorker()
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, w)
		require.NoError(t, coord.Register(rt))
	})
	return &testBundle{db: db, client: workflow.NewClient(rt.Client), coord: coord, rt: rt, worker: w}
}

// waitStatus waits for the workflow to reach status.
func (b *testBundle) waitStatus(t *testing.T, id string, status workflow.Status) *workflow.Details {
	t.Helper()
	var d *workflow.Details
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("workflow %s to be %s", id, status), func() (bool, error) {
		var err error
		d, err = b.client.Get(context.Background(), id)
		return err == nil && d.Status == status, err
	})
	return d
}

func taskByName(t *testing.T, d *workflow.Details, name string) workflow.TaskInfo {
	t.Helper()
	for _, task := range d.Tasks {
		if task.Name == name {
			return task
		}
	}
	t.Fatalf("workflow %s has no task %q", d.ID, name)
	return workflow.TaskInfo{}
}

func outputOf(t *testing.T, task workflow.TaskInfo) stepOutput {
	t.Helper()
	require.NotNil(t, task.Output, "task %s has an output", task.Name)
	var o stepOutput
	require.NoError(t, json.Unmarshal(task.Output, &o))
	return o
}

// states returns each task's state.
func states(d *workflow.Details) map[string]workflow.TaskState {
	out := map[string]workflow.TaskState{}
	for _, t := range d.Tasks {
		out[t.Name] = t.State
	}
	return out
}

// diamond is a -> b, c -> d.
func diamond(name string, opts *workflow.Opts) *workflow.Workflow {
	wf := workflow.New(name, opts)
	wf.Add("a", stepArgs{Name: "a"}, nil)
	wf.Add("b", stepArgs{Name: "b", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}})
	wf.Add("c", stepArgs{Name: "c", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}})
	wf.Add("d", stepArgs{Name: "d", Read: []string{"b", "c"}}, &workflow.TaskOpts{Deps: []string{"b", "c"}})
	return wf
}

// idleQueue puts a task's job in a queue no test runtime works.
func idleQueue() *river.InsertOpts { return &river.InsertOpts{Queue: "idle"} }
