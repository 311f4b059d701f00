package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

func TestDiamondOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Insert(ctx, diamond("diamond", nil))
	require.NoError(t, err)
	require.Len(t, res.Jobs, 4)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: 4}, d.Counts)
	a := outputOf(t, taskByName(t, d, "a"))
	bo := outputOf(t, taskByName(t, d, "b"))
	require.JSONEq(t, string(mustJSON(t, a)), string(bo.Read["a"]), "b read a's output")
	do := outputOf(t, taskByName(t, d, "d"))
	require.Len(t, do.Read, 2)
	require.Empty(t, do.Missing)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestFanOutFanIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const width = 300
	wf := workflow.New("fan", nil)
	wf.Add("root", stepArgs{Name: "root"}, nil)
	leaves := make([]string, width)
	for i := range leaves {
		leaves[i] = fmt.Sprintf("leaf-%03d", i)
		wf.Add(leaves[i], stepArgs{Name: leaves[i], Read: []string{"root"}}, &workflow.TaskOpts{Deps: []string{"root"}})
	}
	wf.Add("sink", stepArgs{Name: "sink", Read: leaves}, &workflow.TaskOpts{Deps: leaves})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: width + 2}, d.Counts)
	sink := taskByName(t, d, "sink")
	out := outputOf(t, sink)
	require.Len(t, out.Read, width, "the fan-in read every leaf's output")
	require.Empty(t, out.Missing)
	sinkStarts := b.worker.Starts("sink")
	require.Len(t, sinkStarts, 1)
	for _, l := range leaves {
		leaf := taskByName(t, d, l)
		require.JSONEq(t, string(leaf.Output), string(out.Read[l]))
		require.True(t, sinkStarts[0].After(*leaf.FinishedAt), "the fan-in started after %s finished", l)
		require.Equal(t, []string{"sink"}, leaf.Dependents)
	}
	require.Len(t, taskByName(t, d, "root").Dependents, width)
}

func TestCountsAndWaitingOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := workflow.New("w", nil)
	wf.Add("a", stepArgs{Name: "a", Wait: true}, nil)
	wf.Add("b", stepArgs{Name: "b"}, nil)
	wf.Add("c", stepArgs{Name: "c"}, &workflow.TaskOpts{Deps: []string{"a", "b"}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	var d *workflow.Details
	pgtest.WaitFor(t, 30*time.Second, "b to complete while a runs", func() (bool, error) {
		d, err = b.client.Get(ctx, res.ID)
		return err == nil && states(d)["b"] == workflow.TaskCompleted && taskByName(t, d, "a").JobState == rivertype.JobStateRunning, err
	})
	require.Equal(t, workflow.Counts{Pending: 1, Active: 1, Completed: 1}, d.Counts, "counts from the workflow's row")
	c := taskByName(t, d, "c")
	require.Equal(t, []string{"a"}, c.WaitingOn)
	require.Equal(t, rivertype.JobStatePending, c.JobState)
	a := taskByName(t, d, "a")
	require.Equal(t, 1, a.Attempts, "the live attempt of an active task")
	require.NotNil(t, a.StartedAt)

	list, err := b.client.List(ctx, workflow.ListParams{Statuses: []workflow.Status{workflow.StatusRunning}})
	require.NoError(t, err)
	require.Len(t, list.Workflows, 1)
	require.Equal(t, d.Counts, list.Workflows[0].Counts)

	b.worker.Release("a")
	d = b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: 3}, d.Counts)
	require.Empty(t, taskByName(t, d, "c").WaitingOn)
}

// outputProbe exercises the task API's errors from inside a task.
type outputProbe struct {
	river.WorkerDefaults[probeArgs]
	got chan map[string]error
}

type probeArgs struct{}

func (probeArgs) Kind() string { return "wftest.probe" }

func (w *outputProbe) Work(ctx context.Context, job *river.Job[probeArgs]) error {
	errs := map[string]error{}
	_, errs["unknown"] = workflow.OutputJSON(ctx, "nope")
	_, errs["pending"] = workflow.OutputJSON(ctx, "later")
	_, errs["decode"] = workflow.Output[int](ctx, "a")
	var o stepOutput
	o, errs["ok"] = workflow.Output[stepOutput](ctx, "a")
	if o.Task != "a" {
		errs["ok"] = fmt.Errorf("read %+v", o)
	}
	errs["large"] = workflow.SetOutput(ctx, strings.Repeat("x", 100))
	ref, ok := workflow.Current(ctx)
	if !ok || ref.Task != "probe" || ref.JobID != job.ID {
		errs["current"] = fmt.Errorf("current is %+v, %v", ref, ok)
	}
	w.got <- errs
	return nil
}

func TestOutputAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, OutputMaxBytes: 64})
	require.NoError(t, err)
	probe := &outputProbe{got: make(chan map[string]error, 1)}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, newStepWorker())
		queue.AddWorker(rt, probe)
	})
	wf := workflow.New("w", nil)
	wf.Add("a", stepArgs{Name: "a"}, nil)
	wf.Add("probe", probeArgs{}, &workflow.TaskOpts{Deps: []string{"a"}})
	wf.Add("later", stepArgs{Name: "later"}, &workflow.TaskOpts{Deps: []string{"probe"}})
	_, err = workflow.NewClient(rt.Client).Insert(ctx, wf)
	require.NoError(t, err)
	var errs map[string]error
	select {
	case errs = <-probe.got:
	case <-time.After(30 * time.Second):
		t.Fatal("the probe never ran")
	}
	require.NoError(t, errs["ok"])
	require.NoError(t, errs["current"])
	require.ErrorIs(t, errs["unknown"], workflow.ErrUnknownTask)
	require.ErrorContains(t, errs["unknown"], `has no task "nope"`)
	require.ErrorIs(t, errs["pending"], workflow.ErrNoOutput)
	require.ErrorContains(t, errs["pending"], "(it is pending)")
	require.ErrorContains(t, errs["decode"], `error decoding the output of task "a" into int`)
	var tooLarge *workflow.OutputTooLargeError
	require.ErrorAs(t, errs["large"], &tooLarge)
	require.Equal(t, 102, tooLarge.Bytes)
	require.ErrorContains(t, errs["large"], `output of task "probe" is 102 bytes of JSON, more than the limit of 64`)

	// Outside a task.
	_, err = workflow.OutputJSON(ctx, "a")
	require.ErrorIs(t, err, workflow.ErrNotInTask)
	require.ErrorIs(t, workflow.SetOutput(ctx, 1), workflow.ErrNotInTask)
	_, ok := workflow.Current(ctx)
	require.False(t, ok)
}

// TestRiverMetadataKept: what a task records in River's metadata
// (river.RecordOutput) is on its completed job, whether the completion went
// through River's JobCompleteTx alone or with others in one statement.
func TestRiverMetadataKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := workflow.New("w", nil)
	for i := range 50 {
		n := fmt.Sprint("t", i)
		wf.Add(n, stepArgs{Name: n, RiverOutput: true}, nil)
	}
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	b.waitStatus(t, res.ID, workflow.StatusCompleted)
	for name, id := range res.Jobs {
		pgtest.WaitFor(t, 10*time.Second, "River's output on job of "+name, func() (bool, error) {
			job, err := b.rt.River().JobGet(ctx, id)
			if err != nil {
				return false, err
			}
			return string(job.Output()) == `"`+name+`"`, nil
		})
	}
	st := b.coord.Stats()
	require.Less(t, st.Batches, st.Completed, "some completions shared a transaction (the set-based path): %+v", st)
}

// TestTaskJobEventsAreTheirRows: River's completion event of a task's job
// carries the job's row as committed (state, finalized_at, metadata,
// River's merged output), though the completion transaction finalized the
// job before River's completer saw it: a task with a metadata update to
// merge, a task whose name cannot be a tag (its identity in the metadata),
// a fan-out whose completions share transactions.
func TestTaskJobEventsAreTheirRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events, cancel := b.rt.River().Subscribe(river.EventKindJobCompleted)
	defer cancel()
	wf := workflow.New("events", nil)
	wf.Add("root", stepArgs{Name: "root"}, nil)
	wf.Add("river output", stepArgs{Name: "river output", RiverOutput: true}, &workflow.TaskOpts{Deps: []string{"root"}})
	leaves := []string{"river output"}
	for i := range 30 {
		n := fmt.Sprint("leaf-", i)
		leaves = append(leaves, n)
		wf.Add(n, stepArgs{Name: n}, &workflow.TaskOpts{Deps: []string{"root"}})
	}
	wf.Add("sink", stepArgs{Name: "sink"}, &workflow.TaskOpts{Deps: leaves})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	got := map[int64]*rivertype.JobRow{}
	deadline := time.After(30 * time.Second)
	for len(got) < len(res.Jobs) {
		select {
		case ev := <-events:
			got[ev.Job.ID] = ev.Job
		case <-deadline:
			t.Fatalf("completion events of %d of %d jobs", len(got), len(res.Jobs))
		}
	}
	for name, id := range res.Jobs {
		ev := got[id]
		require.NotNil(t, ev, name)
		row, err := b.rt.River().JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCompleted, ev.State, name)
		require.Equal(t, row.State, ev.State, name)
		require.NotNil(t, ev.FinalizedAt, name)
		require.True(t, row.FinalizedAt.Equal(*ev.FinalizedAt), "%s: finalized_at %s in the event, %s in the row", name, ev.FinalizedAt, row.FinalizedAt)
		require.JSONEq(t, string(row.Metadata), string(ev.Metadata), name)
		require.Equal(t, row.Attempt, ev.Attempt, name)
		require.Equal(t, row.Tags, ev.Tags, name)
	}
	row, err := b.rt.River().JobGet(ctx, res.Jobs["river output"])
	require.NoError(t, err)
	require.Equal(t, `"river output"`, string(row.Output()))
	b.waitStatus(t, res.ID, workflow.StatusCompleted)
}

// A task's success is recorded before River's completer completes its job
// (record 0023). A job that runs again after that (its process died in
// between) ends as a success without running the task's code again.
func TestRecordedSuccessNotRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := workflow.New("rerun", nil)
	wf.Add("a", stepArgs{Name: "a"}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	b.waitStatus(t, res.ID, workflow.StatusCompleted)
	jobID := res.Jobs["a"]
	jobState := func() (rivertype.JobState, int) {
		job, err := b.rt.River().JobGet(ctx, jobID)
		require.NoError(t, err)
		return job.State, job.Attempt
	}
	pgtest.WaitFor(t, 30*time.Second, "task a's job completed by River", func() (bool, error) {
		st, _ := jobState()
		return st == rivertype.JobStateCompleted, nil
	})
	require.Len(t, b.worker.Starts("a"), 1)

	// The job as a rescue leaves it when its process died after the task's
	// commit and before River's completer wrote the job.
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'available', finalized_at = NULL, scheduled_at = now() WHERE id = $1`), jobID)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "task a's job completed again", func() (bool, error) {
		st, attempt := jobState()
		return st == rivertype.JobStateCompleted && attempt == 2, nil
	})
	require.Len(t, b.worker.Starts("a"), 1, "the recorded task's code did not run again")
	d, err := b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, workflow.StatusCompleted, d.Status)
	require.Equal(t, 1, taskByName(t, d, "a").Attempts)
}
