package workflow_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// childOf returns the child workflow of parent's task, once it exists.
func childOf(t *testing.T, b *durableBundle, parent string) string {
	t.Helper()
	var id string
	pollUntil(t, 30e9, func() bool {
		err := b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT coalesce(max(id::text), '') FROM /*schema*/tributary_workflow WHERE parent_workflow_id = $1`), parent).Scan(&id)
		require.NoError(t, err)
		return id != ""
	})
	return id
}

func TestChildWorkflow(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("parent", nil)
	wf.Add("p", durableArgs{Name: "p", NoTxStep: true, Child: true, ChildSignal: "go"}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	child := childOf(t, b, res.ID)
	// The parent's task waits for the child, snoozed.
	waitSnoozed(t, b.db, res.Jobs["p"])
	_, err = b.client.Signal(ctx, child, "go", 1, nil)
	require.NoError(t, err)
	b.waitStatus(t, child, workflow.StatusCompleted)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, string(workflow.StatusCompleted), durableOutputOf(t, taskByName(t, d, "p")).ChildStat)
	require.Equal(t, 1, effects(t, b.db, "p", "one"), "the parent's steps ran once")
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow WHERE parent_workflow_id = $1`), res.ID).Scan(&n))
	require.Equal(t, 1, n, "one child, started once")
}

// TestChildCancel cancels a parent whose task waits for its child: the
// child is cancelled with it.
func TestChildCancel(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("parent", nil)
	wf.Add("p", durableArgs{Name: "p", NoTxStep: true, Child: true, ChildSignal: "never"}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	child := childOf(t, b, res.ID)
	waitSnoozed(t, b.db, res.Jobs["p"])
	cr, err := b.client.Cancel(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 1, cr.Children)
	d, err := b.client.Get(ctx, child)
	require.NoError(t, err)
	require.Equal(t, workflow.StatusCancelled, d.Status)
	require.Equal(t, workflow.TaskCancelled, taskByName(t, d, "c1").State)
	p, err := b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, workflow.StatusCancelled, p.Status)
}
