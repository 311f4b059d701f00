package workflow_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
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

// TestExpandReleasedAvailable: a task that Expand added becomes available
// in the transaction that records the expanding task's completion, never
// scheduled (which would leave it to River's leader-only scheduler), with
// the tasks staged for the completion (tx nil) and inserted in a StepTx
// before it. Triggers log every state change of the schema's jobs and
// tasks with its transaction, so the test sees the transition itself
// rather than a state the scheduler may have moved on since.
func TestExpandReleasedAvailable(t *testing.T) {
	t.Parallel()
	t.Run("WithCompletion", func(t *testing.T) { t.Parallel(); testExpandReleasedAvailable(t, false) })
	t.Run("InStepTx", func(t *testing.T) { t.Parallel(); testExpandReleasedAvailable(t, true) })
}

func testExpandReleasedAvailable(t *testing.T, inTx bool) {
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(createEffectSQL+`;
CREATE TABLE /*schema*/wftest_job_state (id bigserial, job_id bigint NOT NULL, old_state text NOT NULL, new_state text NOT NULL, xid bigint NOT NULL);
CREATE FUNCTION /*schema*/wftest_log_job_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /*schema*/wftest_job_state (job_id, old_state, new_state, xid) VALUES (NEW.id, OLD.state, NEW.state, txid_current());
    RETURN NEW;
END $$;
CREATE TRIGGER wftest_log_job_state AFTER UPDATE ON /*schema*/river_job
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION /*schema*/wftest_log_job_state();
CREATE TABLE /*schema*/wftest_task_state (name text NOT NULL, new_state text NOT NULL, xid bigint NOT NULL);
CREATE FUNCTION /*schema*/wftest_log_task_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /*schema*/wftest_task_state (name, new_state, xid) VALUES (NEW.name, NEW.state, txid_current());
    RETURN NEW;
END $$;
CREATE TRIGGER wftest_log_task_state AFTER UPDATE ON /*schema*/tributary_workflow_task
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION /*schema*/wftest_log_task_state()`))
	require.NoError(t, err)
	b := setupDurable(t, db, queue.RuntimeConfig{})
	const n = 3
	wf := workflow.New("expand-available", nil)
	wf.Add("split", durableArgs{Name: "split", NoTxStep: true, Expand: n, ExpandTx: inTx}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: n + 1}, d.Counts)

	var completedIn int64
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT xid FROM /*schema*/wftest_task_state WHERE name = 'split' AND new_state = 'completed'`)).Scan(&completedIn))
	for i := range n {
		x := taskByName(t, d, fmt.Sprintf("split-x%d", i))
		rows, err := db.Pool.Query(ctx, db.Q(`SELECT old_state, new_state, xid FROM /*schema*/wftest_job_state WHERE job_id = $1 ORDER BY id`), x.JobID)
		require.NoError(t, err)
		type change struct {
			from, to string
			xid      int64
		}
		changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (change, error) {
			var c change
			return c, r.Scan(&c.from, &c.to, &c.xid)
		})
		require.NoError(t, err)
		require.NotEmpty(t, changes, "%s's job changed state", x.Name)
		require.Equal(t, "pending", changes[0].from, "%s's job was pending first: %v", x.Name, changes)
		require.Equal(t, "available", changes[0].to, "%s's job left pending for available, not scheduled: %v", x.Name, changes)
		require.Equal(t, completedIn, changes[0].xid, "%s's job was released in the transaction that recorded split's completion", x.Name)
	}
}
