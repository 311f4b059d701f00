package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

// once is a task that gets one attempt.
func once(deps ...string) *workflow.TaskOpts {
	return &workflow.TaskOpts{Deps: deps, InsertOpts: &river.InsertOpts{MaxAttempts: 1}}
}

func TestFailurePolicies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CancelIsTheDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "a")
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, once())
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
		wf.Add("c", stepArgs{Name: "c"}, &workflow.TaskOpts{Deps: []string{"b"}})
		wf.Add("x", stepArgs{Name: "x"}, nil)
		wf.Add("y", stepArgs{Name: "y"}, &workflow.TaskOpts{Deps: []string{"a", "x"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, map[string]workflow.TaskState{"a": workflow.TaskFailed, "b": workflow.TaskCancelled, "c": workflow.TaskCancelled,
			"x": workflow.TaskCompleted, "y": workflow.TaskCancelled}, states(d))
		require.Equal(t, workflow.Counts{Completed: 1, Failed: 1, Cancelled: 3}, d.Counts)
		for _, n := range []string{"b", "c", "y"} {
			require.Empty(t, b.worker.Starts(n), "task %s never started", n)
			require.Equal(t, rivertype.JobStateCancelled, taskByName(t, d, n).JobState, "its job is cancelled in River")
		}
		a := taskByName(t, d, "a")
		require.Equal(t, rivertype.JobStateDiscarded, a.JobState)
		require.Equal(t, 1, a.Attempts)
		require.Len(t, a.Errors, 1)
		require.Equal(t, "step a is failing", a.Errors[0].Error)
		require.Equal(t, 1, a.Errors[0].Run)
		require.NotNil(t, a.FinishedAt)
	})

	t.Run("CancelIsImmediate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "a")
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, once())
		wf.Add("x", stepArgs{Name: "x", Wait: true}, nil)
		wf.Add("y", stepArgs{Name: "y"}, &workflow.TaskOpts{Deps: []string{"a", "x"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		pgtest.WaitFor(t, 30*time.Second, "y to be cancelled while x still runs", func() (bool, error) {
			d, err := b.client.Get(ctx, res.ID)
			return err == nil && states(d)["y"] == workflow.TaskCancelled, err
		})
		d, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, workflow.TaskActive, states(d)["x"])
		require.Equal(t, workflow.StatusRunning, d.Status)
		b.worker.Release("x")
		d = b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, workflow.TaskCompleted, states(d)["x"])
	})

	t.Run("Skip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "a")
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, once())
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}, OnDepFailure: workflow.DepFailureSkip})
		wf.Add("c", stepArgs{Name: "c", Read: []string{"b"}}, &workflow.TaskOpts{Deps: []string{"b"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, map[string]workflow.TaskState{"a": workflow.TaskFailed, "b": workflow.TaskSkipped, "c": workflow.TaskCompleted}, states(d))
		require.Empty(t, b.worker.Starts("b"))
		c := outputOf(t, taskByName(t, d, "c"))
		require.Contains(t, c.Missing["b"], `task "b" of workflow `+res.ID+` has no output (it is skipped)`)
		require.Equal(t, workflow.Counts{Completed: 1, Failed: 1, Skipped: 1}, d.Counts)
	})

	t.Run("RunAnyway", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "a")
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, once())
		wf.Add("b", stepArgs{Name: "b", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}, OnDepFailure: workflow.DepFailureRun})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, workflow.TaskCompleted, states(d)["b"])
		require.Contains(t, outputOf(t, taskByName(t, d, "b")).Missing["a"], "has no output (it is failed)")
	})

	t.Run("JobCancelFailsTheTask", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a", Cancel: true}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 5}})
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		a := taskByName(t, d, "a")
		require.Equal(t, workflow.TaskFailed, a.State)
		require.Equal(t, rivertype.JobStateCancelled, a.JobState)
		require.Equal(t, 1, a.Attempts, "river.JobCancel is not retried")
		require.Contains(t, a.Errors[0].Error, "step a gives up")
		require.Equal(t, workflow.TaskCancelled, states(d)["b"])
	})

	t.Run("PanicIsRecoveredWithItsStack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a", Panic: true}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 2}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		a := taskByName(t, d, "a")
		require.Equal(t, 2, a.Attempts, "a panic is a failed attempt, retried")
		require.Len(t, a.Errors, 2)
		for _, e := range a.Errors {
			require.Contains(t, e.Error, "task panicked: step a panics")
			require.Contains(t, e.Error, "stepWorker).Work", "the stack of the panic, with the task's frames")
		}
		require.Contains(t, a.Errors[1].Trace, "stepWorker).Work")
		require.Len(t, b.worker.Starts("a"), 2)
	})

	t.Run("RetriedAttemptsRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a", FailAttempts: 2}, nil)
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
		a := taskByName(t, d, "a")
		require.Equal(t, 3, a.Attempts)
		require.Len(t, a.Errors, 2)
		require.Equal(t, 3, outputOf(t, a).Attempt)
		require.NotNil(t, a.StartedAt)
	})
}

func TestCompensation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	saga := func() *workflow.Workflow {
		wf := workflow.New("saga", nil)
		wf.Add("charge", stepArgs{Name: "charge"}, once())
		wf.Add("ship", stepArgs{Name: "ship"}, once("charge"))
		wf.Add("refund", stepArgs{Name: "refund", Read: []string{"charge"}}, &workflow.TaskOpts{Deps: []string{"charge"}, RunIf: workflow.AnyFailed("ship")})
		wf.Add("notify", stepArgs{Name: "notify"}, &workflow.TaskOpts{Deps: []string{"ship"}})
		return wf
	}

	t.Run("RunsWhenItsTaskFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "ship")
		res, err := b.client.Insert(ctx, saga())
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, map[string]workflow.TaskState{"charge": workflow.TaskCompleted, "ship": workflow.TaskFailed,
			"refund": workflow.TaskCompleted, "notify": workflow.TaskCancelled}, states(d))
		refund := taskByName(t, d, "refund")
		require.Equal(t, []string{"charge", "ship"}, refund.Deps, "the condition's task became a dependency")
		require.Equal(t, []string{"ship"}, refund.RunIf.AnyFailed)
		require.Contains(t, outputOf(t, refund).Read, "charge", "the compensation reads what it compensates")
		for _, ts := range b.worker.Starts("refund") {
			require.True(t, ts.After(*taskByName(t, d, "ship").FinishedAt))
		}
	})

	t.Run("SkippedWhenItsTaskSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.client.Insert(ctx, saga())
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
		require.Equal(t, workflow.TaskSkipped, states(d)["refund"])
		require.Empty(t, b.worker.Starts("refund"))
		require.Equal(t, workflow.Counts{Completed: 3, Skipped: 1}, d.Counts)
	})

	t.Run("SkippedWhenItsTaskNeverRan", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.SetFailing(true, "charge")
		res, err := b.client.Insert(ctx, saga())
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, map[string]workflow.TaskState{"charge": workflow.TaskFailed, "ship": workflow.TaskCancelled,
			"refund": workflow.TaskSkipped, "notify": workflow.TaskCancelled}, states(d))
	})
}
