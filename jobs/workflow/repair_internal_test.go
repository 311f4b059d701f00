package workflow

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestRepairPagesThroughRunningWorkflows runs the repair sweep with pages
// of two running workflows and three tasks, and shows it reaching a task
// left undecided in a workflow past the first page, one past the first
// page of a workflow's own tasks, and, after the end, the first workflow
// again (wrap-around).
func TestRepairPagesThroughRunningWorkflows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := clientOn(t, db)
	coord, err := NewCoordinator(db.Pool, CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t), RepairInterval: -1})
	require.NoError(t, err)
	coord.repairWorkflows, coord.repairTasks = 2, 3

	idle := &TaskOpts{InsertOpts: &river.InsertOpts{Queue: "idle"}}
	// Five two-task workflows (a -> b) and, last, one of five (a -> b, c,
	// d, e), inserted in id order.
	var ids []string
	var jobs []map[string]int64
	for i := range 6 {
		wf := New("w", nil)
		wf.Add("a", idleArgs{}, idle)
		wf.Add("b", idleArgs{}, &TaskOpts{Deps: []string{"a"}, InsertOpts: idle.InsertOpts})
		if i == 5 {
			for _, name := range []string{"c", "d", "e"} {
				wf.Add(name, idleArgs{}, &TaskOpts{Deps: []string{"a"}, InsertOpts: idle.InsertOpts})
			}
		}
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		ids = append(ids, res.ID)
		jobs = append(jobs, res.Jobs)
	}
	// undecide leaves a pending task with nothing to wait for (a lost
	// decision), unchanged for a minute.
	undecide := func(wf, task string) {
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow_task SET pending_deps = 0, updated_at = updated_at - interval '1 minute'
WHERE workflow_id = $1 AND name = $2`), wf, task)
		require.NoError(t, err)
	}
	state := func(wf, task string) TaskState {
		var s TaskState
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT state FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1 AND name = $2`), wf, task).Scan(&s))
		return s
	}
	pass := func() int {
		n, err := coord.Repair(ctx)
		require.NoError(t, err)
		return n
	}
	undecide(ids[3], "b")
	undecide(ids[5], "e")

	// Pages of at most two workflows and three tasks: one workflow each
	// (two tasks, and a second one would make four); the big one in two.
	require.Zero(t, pass(), "workflow 0")
	require.Zero(t, pass(), "workflow 1")
	require.Zero(t, pass(), "workflow 2")
	require.Equal(t, 1, pass(), "workflow 3, past the first page")
	require.Equal(t, TaskActive, state(ids[3], "b"))
	require.Zero(t, pass(), "workflow 4")
	require.Zero(t, pass(), "workflow 5's first three tasks (a, b, c)")
	require.Equal(t, TaskPending, state(ids[5], "e"))
	require.Equal(t, 1, pass(), "workflow 5's last two (d, e)")
	require.Equal(t, TaskActive, state(ids[5], "e"))

	// Past the end: the next pass starts again with the first workflow.
	undecide(ids[0], "b")
	require.Equal(t, 1, pass(), "workflow 0 again")
	require.Equal(t, TaskActive, state(ids[0], "b"))

	// A cursor past the last running workflow (the ones after it finished
	// or were deleted) wraps around in the same pass: workflow 0's root,
	// whose job went back to pending (a lost release), is released.
	coord.repairMu.Lock()
	coord.repairCursor = repairCursor{workflowID: "ffffffff-ffff-ffff-ffff-ffffffffffff"}
	coord.repairMu.Unlock()
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'pending' WHERE id = $1`), jobs[0]["a"])
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow_task SET updated_at = updated_at - interval '1 minute' WHERE workflow_id = $1`), ids[0])
	require.NoError(t, err)
	require.Equal(t, 1, pass(), "workflow 0, from the start")
	var jobState string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT state::text FROM /*schema*/river_job WHERE id = $1`), jobs[0]["a"]).Scan(&jobState))
	require.Equal(t, "available", jobState)
}
