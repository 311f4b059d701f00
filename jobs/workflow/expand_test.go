package workflow_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestExpand has a task add five tasks at run time, which a pending
// fan-in task is made to wait for: the fan-in starts after every expanded
// task completed and reads their outputs; the workflow's counts include
// them.
func TestExpand(t *testing.T) {
	t.Parallel()
	t.Run("WithCompletion", func(t *testing.T) { t.Parallel(); testExpand(t, false) })
	// In a StepTx, and the task fails once after it: the expansion is
	// recorded with the step and not repeated.
	t.Run("InStepTx", func(t *testing.T) { t.Parallel(); testExpand(t, true) })
}

func testExpand(t *testing.T, inTx bool) {
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	const n = 5
	var expanded []string
	for i := range n {
		expanded = append(expanded, fmt.Sprintf("split-x%d", i))
	}
	wf := workflow.New("expand", nil)
	wf.Add("split", durableArgs{Name: "split", NoTxStep: true, Expand: n, ExpandSink: "sink", ExpandTx: inTx}, nil)
	wf.Add("sink", stepArgs{Name: "sink", Read: expanded}, &workflow.TaskOpts{Deps: []string{"split"}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: n + 2}, d.Counts)
	if inTx {
		require.Equal(t, 2, taskByName(t, d, "split").Attempts, "the expansion survived the failed attempt, once")
	}
	sink := taskByName(t, d, "sink")
	require.ElementsMatch(t, append([]string{"split"}, expanded...), sink.Deps)
	out := outputOf(t, sink)
	require.Len(t, out.Read, n, "the fan-in read every expanded task's output: %v", out.Missing)
	for _, name := range expanded {
		x := taskByName(t, d, name)
		require.Equal(t, []string{"split"}, x.Deps)
		require.False(t, x.StartedAt.Before(*taskByName(t, d, "split").FinishedAt), "%s started after split finished", name)
		require.False(t, sink.StartedAt.Before(*x.FinishedAt), "sink started after %s finished", name)
	}
}

// TestExpandErrors: an expansion that names a task of the workflow fails
// the expanding task, and adds nothing.
func TestExpandErrors(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("expand-bad", nil)
	// "other" has no dependencies: it is not pending, so it cannot be made
	// to wait for the expansion.
	wf.Add("split", durableArgs{Name: "split", NoTxStep: true, Expand: 2, ExpandSink: "other"},
		&workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	wf.Add("other", stepArgs{Name: "other", Wait: true}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	b.steps.Release("other")
	d := b.waitStatus(t, res.ID, workflow.StatusFailed)
	split := taskByName(t, d, "split")
	require.Equal(t, workflow.TaskFailed, split.State)
	require.Contains(t, split.Errors[len(split.Errors)-1].Error, `lists dependent "other", which is not a pending task`)
	require.Len(t, d.Tasks, 2, "nothing was added")
}
