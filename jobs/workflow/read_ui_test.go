package workflow_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestStatusCountsAndRunningTaskCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Three running workflows (their tasks on a queue nobody works), two
	// completed ones.
	for i := range 3 {
		wf := workflow.New("idle", nil)
		wf.Add("a", stepArgs{Name: "a"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}, InsertOpts: idleQueue()})
		_, err := b.client.Insert(ctx, wf)
		require.NoError(t, err, "workflow %d", i)
	}
	for i := range 2 {
		res, err := b.client.Insert(ctx, diamond(fmt.Sprintf("done-%d", i), nil))
		require.NoError(t, err)
		b.waitStatus(t, res.ID, workflow.StatusCompleted)
	}

	counts, err := b.client.StatusCounts(ctx, b.db.Pool, 100)
	require.NoError(t, err)
	require.EqualValues(t, 3, counts[workflow.StatusRunning].N)
	require.EqualValues(t, 2, counts[workflow.StatusCompleted].N)
	require.Zero(t, counts[workflow.StatusFailed].N)
	require.False(t, counts[workflow.StatusRunning].Approximate)

	// At the cap, a count is marked approximate and never below the cap.
	counts, err = b.client.StatusCounts(ctx, b.db.Pool, 2)
	require.NoError(t, err)
	require.True(t, counts[workflow.StatusRunning].Approximate)
	require.GreaterOrEqual(t, counts[workflow.StatusRunning].N, int64(2))
	require.True(t, counts[workflow.StatusCompleted].Approximate)
	require.False(t, counts[workflow.StatusFailed].Approximate)

	tasks, capped, err := b.client.RunningTaskCounts(ctx, b.db.Pool, 100)
	require.NoError(t, err)
	require.False(t, capped)
	require.Equal(t, workflow.Counts{Pending: 3, Active: 3}, tasks, "completed workflows are not summed")
	tasks, capped, err = b.client.RunningTaskCounts(ctx, b.db.Pool, 2)
	require.NoError(t, err)
	require.True(t, capped)
	require.Equal(t, workflow.Counts{Pending: 2, Active: 2}, tasks)

	_, err = b.client.StatusCounts(ctx, b.db.Pool, 0)
	require.ErrorContains(t, err, "invalid count cap 0")
}

// TestStatusCountsKeepTheCallersSettings runs the counts inside a caller's
// transaction: the planner setting they change ends with them.
func TestStatusCountsKeepTheCallersSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.client.StatusCounts(ctx, tx, 10)
	require.NoError(t, err)
	_, _, err = b.client.RunningTaskCounts(ctx, tx, 10)
	require.NoError(t, err)
	var bitmap string
	require.NoError(t, tx.QueryRow(ctx, "SHOW enable_bitmapscan").Scan(&bitmap))
	require.Equal(t, "on", bitmap)
}
