package workflow_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestFork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ChainFailedAtThree", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		once := &river.InsertOpts{MaxAttempts: 1}
		wf := workflow.New("fork-chain", &workflow.Opts{ID: "chain-1", Attributes: map[string]string{"customer": "c-42"}})
		wf.Add("s1", stepArgs{Name: "s1"}, nil)
		wf.Add("s2", stepArgs{Name: "s2", Read: []string{"s1"}}, &workflow.TaskOpts{Deps: []string{"s1"}})
		wf.Add("s3", stepArgs{Name: "s3", Read: []string{"s2"}}, &workflow.TaskOpts{Deps: []string{"s2"}, InsertOpts: once})
		wf.Add("s4", stepArgs{Name: "s4", Read: []string{"s3"}}, &workflow.TaskOpts{Deps: []string{"s3"}})
		b.worker.SetFailing(true, "s3")
		orig, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		o, err := b.client.Await(ctx, orig.ID)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusFailed, o.Status)
		origDetails, err := b.client.Get(ctx, orig.ID)
		require.NoError(t, err)
		s2Output := taskByName(t, origDetails, "s2").Output

		b.worker.SetFailing(false, "s3") // the fix is deployed
		forked, err := b.client.Fork(ctx, "chain-1", "s3")
		require.NoError(t, err)
		require.NotEqual(t, orig.ID, forked.ID)
		require.ElementsMatch(t, []string{"s3", "s4"}, keys(forked.Jobs), "only s3 and s4 get jobs")
		out, err := workflow.AwaitResult[stepOutput](ctx, b.client, forked.ID, "s4")
		require.NoError(t, err)
		require.Equal(t, "s4", out.Task)

		require.Len(t, b.worker.Starts("s1"), 1, "s1 is not run again")
		require.Len(t, b.worker.Starts("s2"), 1, "s2 is not run again")
		require.Len(t, b.worker.Starts("s3"), 2, "s3 failed once, then ran in the fork")
		require.Len(t, b.worker.Starts("s4"), 1, "s4 runs in the fork only")

		d, err := b.client.Get(ctx, forked.ID)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusCompleted, d.Status)
		require.Equal(t, &workflow.Origin{WorkflowID: orig.ID, Task: "s3"}, d.Origin)
		require.Equal(t, map[string]string{"customer": "c-42"}, d.Attributes)
		require.Empty(t, d.Key, "the key stays with the original")
		require.Equal(t, workflow.Counts{Completed: 4}, d.Counts)
		require.JSONEq(t, string(s2Output), string(taskByName(t, d, "s2").Output), "s2's output is copied")
		s3 := outputOf(t, taskByName(t, d, "s3"))
		require.JSONEq(t, string(s2Output), string(s3.Read["s2"]), "s3 read the copied output of s2")
		s4 := outputOf(t, taskByName(t, d, "s4"))
		require.Equal(t, "s3", outputOf(t, workflow.TaskInfo{Name: "s3", Output: s4.Read["s3"]}).Task)

		still, err := b.client.Summary(ctx, orig.ID)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusFailed, still.Status, "the original is left as it was")

		_, err = b.client.Fork(ctx, orig.ID, "s9")
		require.ErrorIs(t, err, workflow.ErrUnknownTask)
	})

	t.Run("FailedSiblingRunsAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		once := &river.InsertOpts{MaxAttempts: 1}
		wf := workflow.New("fork-diamond", nil)
		wf.Add("a", stepArgs{Name: "a"}, nil)
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
		wf.Add("c", stepArgs{Name: "c"}, &workflow.TaskOpts{Deps: []string{"a"}, InsertOpts: once})
		wf.Add("d", stepArgs{Name: "d", Read: []string{"b", "c"}}, &workflow.TaskOpts{Deps: []string{"b", "c"}})
		b.worker.SetFailing(true, "c")
		orig, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		_, err = b.client.Await(ctx, orig.ID)
		require.NoError(t, err)
		b.worker.SetFailing(false, "c")
		forked, err := b.client.Fork(ctx, orig.ID, "b")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"b", "c", "d"}, keys(forked.Jobs), "c failed, so it runs again beside b")
		o, err := b.client.Await(ctx, forked.ID)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusCompleted, o.Status)
		require.Len(t, b.worker.Starts("a"), 1)
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
