package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

// TestTaskHotPathUpdatesStayOnTheirPage works a diamond to completion and a
// workflow whose root gives up (its dependent cancelled) and reads the task
// table's update counters: every update of a task row on the completion
// path (recording an outcome, telling a dependent, releasing it, cancelling
// it) is HOT, a new version on the same page with no index entries, because
// no index of tributary_workflow_task covers a column those updates change
// (migration 0018).
func TestTaskHotPathUpdatesStayOnTheirPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ok, err := b.client.Insert(ctx, diamond("ok", nil))
	require.NoError(t, err)
	wf := workflow.New("gives-up", nil)
	wf.Add("root", stepArgs{Name: "root", Cancel: true}, nil)
	wf.Add("next", stepArgs{Name: "next"}, &workflow.TaskOpts{Deps: []string{"root"}})
	failed, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	b.waitStatus(t, ok.ID, workflow.StatusCompleted)
	b.waitStatus(t, failed.ID, workflow.StatusFailed)

	// The counters reach pg_stat_user_tables when each backend reports
	// them (at most a second after its transaction); a backend reports its
	// updates and HOT updates together. Each of the six tasks' rows is
	// updated at least once: its outcome, or its cancel.
	var updated, hot int64
	pgtest.WaitFor(t, 60*time.Second, "the task table's update counts", func() (bool, error) {
		err := b.db.Pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = 'tributary_workflow_task'`, b.db.Schema).Scan(&updated, &hot)
		return err == nil && updated >= 6, err
	})
	require.Equal(t, updated, hot, "every task-row update is HOT")
}
