package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestRepair changes jobs behind the workflows' back, as River's own API or
// a lost update would, and shows the repair sweep recording what happened.
// No runtime works the jobs, so they stay where the test puts them.
func TestRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	qc := db.Client(t)
	client := workflow.NewClient(qc)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t), RepairInterval: -1})
	require.NoError(t, err)

	insert := func() *workflow.InsertResult {
		wf := workflow.New("w", nil)
		wf.Add("a", stepArgs{Name: "a"}, nil)
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		return res
	}
	backdate := func(id string) {
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow_task SET updated_at = updated_at - interval '1 minute' WHERE workflow_id = $1`), id)
		require.NoError(t, err)
	}
	exec := func(sql string, args ...any) {
		_, err := db.Pool.Exec(ctx, db.Q(sql), args...)
		require.NoError(t, err)
	}

	cancelled := insert()
	_, err = qc.River().JobCancel(ctx, cancelled.Jobs["a"])
	require.NoError(t, err)
	deleted := insert()
	_, err = qc.River().JobDelete(ctx, deleted.Jobs["a"])
	require.NoError(t, err)
	discarded := insert()
	exec(`UPDATE /*schema*/river_job SET state = 'discarded', attempt = 1, finalized_at = now(),
        errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'boom', 'trace', '')] WHERE id = $1`, discarded.Jobs["a"])
	completed := insert() // by a worker process without the middleware
	exec(`UPDATE /*schema*/river_job SET state = 'completed', attempt = 1, finalized_at = now() WHERE id = $1`, completed.Jobs["a"])
	lostPromotion := insert()
	exec(`UPDATE /*schema*/river_job SET state = 'pending' WHERE id = $1`, lostPromotion.Jobs["a"])
	undecided := insert()
	exec(`UPDATE /*schema*/tributary_workflow_task SET pending_deps = 0 WHERE workflow_id = $1 AND name = 'b'`, undecided.ID)
	recent := insert()
	_, err = qc.River().JobCancel(ctx, recent.Jobs["a"])
	require.NoError(t, err)
	for _, r := range []*workflow.InsertResult{cancelled, deleted, discarded, completed, lostPromotion, undecided} {
		backdate(r.ID)
	}

	n, err := coord.Repair(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, int64(6), coord.Stats().Repaired)

	get := func(r *workflow.InsertResult) *workflow.Details {
		d, err := client.Get(ctx, r.ID)
		require.NoError(t, err)
		return d
	}
	d := get(cancelled)
	require.Equal(t, workflow.StatusCancelled, d.Status, "an operator's JobCancel is a cancel")
	require.Equal(t, map[string]workflow.TaskState{"a": workflow.TaskCancelled, "b": workflow.TaskCancelled}, states(d))
	require.Equal(t, rivertype.JobStateCancelled, taskByName(t, d, "b").JobState)

	d = get(deleted)
	require.Equal(t, workflow.StatusCancelled, d.Status)
	require.Contains(t, taskByName(t, d, "a").Errors[0].Error, "no longer exists (deleted outside the workflow)")

	d = get(discarded)
	require.Equal(t, workflow.StatusFailed, d.Status)
	require.Equal(t, "boom", taskByName(t, d, "a").Errors[0].Error)
	require.Equal(t, workflow.Counts{Failed: 1, Cancelled: 1}, d.Counts)

	d = get(completed)
	require.Equal(t, map[string]workflow.TaskState{"a": workflow.TaskCompleted, "b": workflow.TaskActive}, states(d))
	require.Nil(t, taskByName(t, d, "a").Output, "a job completed without the middleware leaves no output")
	require.Equal(t, rivertype.JobStateAvailable, taskByName(t, d, "b").JobState, "its dependent was released")

	d = get(lostPromotion)
	require.Equal(t, rivertype.JobStateAvailable, taskByName(t, d, "a").JobState)

	d = get(undecided)
	require.Equal(t, workflow.TaskActive, states(d)["b"])
	require.Equal(t, rivertype.JobStateAvailable, taskByName(t, d, "b").JobState)
	require.Equal(t, workflow.Counts{Active: 2}, d.Counts)

	d = get(recent)
	require.Equal(t, workflow.TaskActive, states(d)["a"], "a task changed within the quiet time is left alone")

	n, err = coord.Repair(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to repair")
}

// TestRepairSweepRuns shows the sweep running by itself in a runtime: a task
// whose job was cancelled with River's API while waiting in a queue nobody
// works, before its worker could record anything.
func TestRepairSweepRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	b := setupOn(t, db, workflow.CoordinatorConfig{RepairInterval: 100 * time.Millisecond})
	ctx := context.Background()
	wf := workflow.New("w", nil)
	wf.Add("idle", stepArgs{Name: "idle"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	_, err = b.rt.River().JobCancel(ctx, res.Jobs["idle"])
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow_task SET updated_at = updated_at - interval '1 minute' WHERE workflow_id = $1`), res.ID)
	require.NoError(t, err)
	b.waitStatus(t, res.ID, workflow.StatusCancelled)
}

// TestServiceContract runs the lifecycle contract against the coordinator.
func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "workflow.Coordinator", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t), RepairInterval: time.Hour})
	})
}
