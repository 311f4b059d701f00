package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := workflow.New("w", &workflow.Opts{ID: "cancel-me"})
	wf.Add("running", stepArgs{Name: "running", Wait: true}, nil)
	wf.Add("done", stepArgs{Name: "done"}, nil)
	wf.Add("after", stepArgs{Name: "after"}, &workflow.TaskOpts{Deps: []string{"running", "done"}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "one task done, one running", func() (bool, error) {
		d, err := b.client.Get(ctx, res.ID)
		return err == nil && states(d)["done"] == workflow.TaskCompleted && taskByName(t, d, "running").JobState == rivertype.JobStateRunning, err
	})

	cres, err := b.client.Cancel(ctx, "cancel-me")
	require.NoError(t, err)
	require.Equal(t, &workflow.CancelResult{ID: res.ID, Cancelled: 2, Interrupted: 1}, cres)
	d, err := b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, workflow.StatusCancelled, d.Status)
	require.NotNil(t, d.FinishedAt)
	require.Equal(t, map[string]workflow.TaskState{"running": workflow.TaskCancelled, "done": workflow.TaskCompleted, "after": workflow.TaskCancelled}, states(d))
	require.Equal(t, workflow.Counts{Completed: 1, Cancelled: 2}, d.Counts)

	// The running task's context was cancelled (it returned), and its job
	// ends cancelled; the pending one never starts.
	b.db.WaitForJobState(t, taskByName(t, d, "running").JobID, rivertype.JobStateCancelled, 30*time.Second)
	require.Equal(t, rivertype.JobStateCancelled, taskByName(t, d, "after").JobState)
	require.Empty(t, b.worker.Starts("after"))
	d, err = b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, workflow.TaskCancelled, states(d)["running"], "the interrupted task stays cancelled")
	require.Equal(t, workflow.StatusCancelled, d.Status)

	_, err = b.client.Cancel(ctx, res.ID)
	require.ErrorIs(t, err, workflow.ErrFinished)
	require.ErrorContains(t, err, "it is cancelled")
	_, err = b.client.Cancel(ctx, "no-such-workflow")
	require.ErrorIs(t, err, workflow.ErrNotFound)
}

// TestRetryModes runs a workflow where b fails, then retries it in each
// mode:
//
//	a -> b -> c          (c is cancelled when b fails)
//	     b -> y          (y runs anyway)
//	x                    (independent)
func TestRetryModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	build := func() *workflow.Workflow {
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, nil)
		wf.Add("b", stepArgs{Name: "b", Read: []string{"a"}}, once("a"))
		wf.Add("c", stepArgs{Name: "c", Read: []string{"b"}}, &workflow.TaskOpts{Deps: []string{"b"}})
		wf.Add("y", stepArgs{Name: "y", Read: []string{"b"}}, &workflow.TaskOpts{Deps: []string{"b"}, OnDepFailure: workflow.DepFailureRun})
		wf.Add("x", stepArgs{Name: "x"}, nil)
		return wf
	}
	start := func(t *testing.T) (*testBundle, *workflow.Details) {
		b := setup(t)
		b.worker.SetFailing(true, "b")
		res, err := b.client.Insert(ctx, build())
		require.NoError(t, err)
		d := b.waitStatus(t, res.ID, workflow.StatusFailed)
		require.Equal(t, map[string]workflow.TaskState{"a": workflow.TaskCompleted, "b": workflow.TaskFailed,
			"c": workflow.TaskCancelled, "y": workflow.TaskCompleted, "x": workflow.TaskCompleted}, states(d))
		b.worker.SetFailing(false, "b")
		return b, d
	}
	runs := func(b *testBundle) map[string]int {
		out := map[string]int{}
		for _, n := range []string{"a", "b", "c", "y", "x"} {
			out[n] = len(b.worker.Starts(n))
		}
		return out
	}

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		b, before := start(t)
		res, err := b.client.Retry(ctx, before.ID, workflow.RetryFailed)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, res.Tasks)
		require.NotEqual(t, taskByName(t, before, "b").JobID, res.Jobs["b"], "a new job")
		d := b.waitStatus(t, before.ID, workflow.StatusCompleted)
		require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1, "y": 1, "x": 1}, runs(b))
		bt := taskByName(t, d, "b")
		require.Equal(t, 2, bt.Run)
		require.Equal(t, 2, bt.Attempts, "attempts over both runs")
		require.Len(t, bt.Errors, 1, "the first run's failure stays in the record")
		require.Equal(t, 1, bt.Errors[0].Run)
		require.Contains(t, outputOf(t, taskByName(t, d, "c")).Read, "b", "c ran after b's retry and read its output")
		require.Contains(t, outputOf(t, taskByName(t, d, "y")).Missing, "b", "y kept its first run's result")
		require.Equal(t, workflow.Counts{Completed: 5}, d.Counts)
		require.NotNil(t, d.FinishedAt)
	})

	t.Run("FailedAndDownstream", func(t *testing.T) {
		t.Parallel()
		b, before := start(t)
		res, err := b.client.Retry(ctx, before.ID, workflow.RetryFailedAndDownstream)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"b", "c", "y"}, res.Tasks)
		d := b.waitStatus(t, before.ID, workflow.StatusCompleted)
		require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1, "y": 2, "x": 1}, runs(b))
		require.Contains(t, outputOf(t, taskByName(t, d, "y")).Read, "b", "y ran again, after b")
		for _, n := range []string{"c", "y"} {
			starts := b.worker.Starts(n)
			require.True(t, starts[len(starts)-1].After(*taskByName(t, d, "b").FinishedAt), "%s ran after b's retry finished", n)
		}
	})

	t.Run("All", func(t *testing.T) {
		t.Parallel()
		b, before := start(t)
		res, err := b.client.Retry(ctx, before.ID, workflow.RetryAll)
		require.NoError(t, err)
		require.Len(t, res.Tasks, 5)
		d := b.waitStatus(t, before.ID, workflow.StatusCompleted)
		require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 1, "y": 2, "x": 2}, runs(b))
		for _, task := range d.Tasks {
			require.Equal(t, 2, task.Run)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a", Wait: true}, nil)
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		_, err = b.client.Retry(ctx, res.ID, workflow.RetryAll)
		require.ErrorIs(t, err, workflow.ErrTaskActive)
		require.ErrorContains(t, err, `task "a" is active`)
		_, err = b.client.Retry(ctx, res.ID, workflow.RetryFailed)
		require.ErrorIs(t, err, workflow.ErrNothingToRetry)
		_, err = b.client.Retry(ctx, res.ID, "some")
		require.ErrorContains(t, err, `invalid retry mode "some": want one of [failed failed-and-downstream all]`)
		b.worker.Release("a")
		b.waitStatus(t, res.ID, workflow.StatusCompleted)
		_, err = b.client.Retry(ctx, res.ID, workflow.RetryFailed)
		require.ErrorIs(t, err, workflow.ErrNothingToRetry)
	})

	t.Run("CancelledWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, nil)
		wf.Add("b", stepArgs{Name: "b", Wait: true}, &workflow.TaskOpts{Deps: []string{"a"}})
		wf.Add("c", stepArgs{Name: "c"}, &workflow.TaskOpts{Deps: []string{"b"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, "b", <-waitStarted(t, b, "b"))
		_, err = b.client.Cancel(ctx, res.ID)
		require.NoError(t, err)
		pgtest.WaitFor(t, 30*time.Second, "b's job to end", func() (bool, error) {
			d, err := b.client.Get(ctx, res.ID)
			return err == nil && taskByName(t, d, "b").JobState == rivertype.JobStateCancelled, err
		})
		// Resuming a cancelled workflow: the cancelled tasks run again.
		b.worker.Release("b")
		rres, err := b.client.Retry(ctx, res.ID, workflow.RetryFailed)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, rres.Tasks)
		d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
		require.Equal(t, workflow.Counts{Completed: 3}, d.Counts)
	})
}

// waitStarted returns a channel that yields name once the step started.
func waitStarted(t *testing.T, b *testBundle, name string) <-chan string {
	t.Helper()
	ch := make(chan string, 1)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case n := <-b.worker.started:
			if n == name {
				ch <- n
				return ch
			}
		case <-deadline:
			t.Fatalf("step %s never started", name)
		}
	}
}
