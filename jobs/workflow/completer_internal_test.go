package workflow

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
)

// TestCompletionBatchGuards commits one completion batch by hand, with an
// outcome of each kind the transaction must tell apart: a success whose
// job runs at that attempt (recorded, its job completed, its dependent
// released), a success whose job has moved on to another attempt (stale:
// nothing written), a success of a task an operator cancelled while it ran
// (recorded from cancelled, its dependent left cancelled) and a failure
// (its job discarded, its dependent cancelled by policy). The counts and
// statuses of both workflows follow.
func TestCompletionBatchGuards(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := clientOn(t, db)
	idle := &TaskOpts{InsertOpts: &river.InsertOpts{Queue: "idle"}}
	newWF := func(name string, tasks ...string) *InsertResult {
		wf := New(name, nil)
		for _, task := range tasks {
			wf.Add(task, idleArgs{}, idle)
			wf.Add(task+"-next", idleArgs{}, &TaskOpts{Deps: []string{task}, InsertOpts: idle.InsertOpts})
		}
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		return res
	}
	one := newWF("one", "ok", "stale", "bad")
	cancelled := newWF("cancelled", "late")
	coord, err := NewCoordinator(db.Pool, CoordinatorConfig{Schema: db.Schema})
	require.NoError(t, err)

	// River's fetch, by hand: every root's job running at attempt 1, but
	// the stale one's at attempt 2 (rescued and started again elsewhere).
	start := func(id int64, attempt int) {
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'running', attempt = $2, attempted_at = now() WHERE id = $1`), id, attempt)
		require.NoError(t, err)
	}
	start(one.Jobs["ok"], 1)
	start(one.Jobs["stale"], 2)
	start(one.Jobs["bad"], 1)
	start(cancelled.Jobs["late"], 1)
	_, err = client.Cancel(ctx, cancelled.ID)
	require.NoError(t, err)

	now := time.Now().UTC()
	success := func(res *InsertResult, task string, output string) *request {
		return &request{jobCtx: ctx, job: &rivertype.JobRow{ID: res.Jobs[task], Attempt: 1}, jobState: rivertype.JobStateCompleted,
			outcome: outcome{WorkflowID: res.ID, Task: task, JobID: res.Jobs[task], State: TaskCompleted, Attempt: 1, StartedAt: &now,
				Output: json.RawMessage(output), Errors: []AttemptError{}}}
	}
	failure := &request{jobCtx: ctx, job: &rivertype.JobRow{ID: one.Jobs["bad"], Attempt: 1}, jobState: rivertype.JobStateDiscarded,
		outcome: outcome{WorkflowID: one.ID, Task: "bad", JobID: one.Jobs["bad"], State: TaskFailed, Attempt: 1, StartedAt: &now,
			Errors: []AttemptError{{Attempt: 1, At: now, Error: "boom"}}}}
	batch := []*request{success(one, "ok", `1`), success(one, "stale", `2`), failure, success(cancelled, "late", `3`)}
	require.NoError(t, coord.completer.commitTx(ctx, batch))
	st := coord.Stats()
	require.Equal(t, int64(1), st.Stale)
	require.Equal(t, int64(2), st.Completed)
	require.Equal(t, int64(1), st.Failed)

	jobState := func(id int64) (state string, attempt int) {
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt FROM /*schema*/river_job WHERE id = $1`), id).Scan(&state, &attempt))
		return state, attempt
	}
	tasks := func(id string) map[string]TaskInfo {
		d, err := client.Get(ctx, id)
		require.NoError(t, err)
		out := map[string]TaskInfo{}
		for _, ti := range d.Tasks {
			out[ti.Name] = ti
		}
		return out
	}

	got := tasks(one.ID)
	require.Equal(t, TaskCompleted, got["ok"].State)
	require.JSONEq(t, `1`, string(got["ok"].Output))
	state, _ := jobState(one.Jobs["ok"])
	require.Equal(t, "running", state, "River's completer completes a recorded success's job")
	require.Equal(t, TaskActive, got["ok-next"].State, "released with its dependency's completion")
	state, _ = jobState(one.Jobs["ok-next"])
	require.Equal(t, "available", state)

	require.Equal(t, TaskActive, got["stale"].State, "a stale attempt's success is not recorded")
	require.Empty(t, got["stale"].Output)
	state, attempt := jobState(one.Jobs["stale"])
	require.Equal(t, "running", state, "the newer attempt's job is left alone")
	require.Equal(t, 2, attempt)
	require.Equal(t, TaskPending, got["stale-next"].State)
	state, _ = jobState(one.Jobs["stale-next"])
	require.Equal(t, "pending", state)

	require.Equal(t, TaskFailed, got["bad"].State)
	state, _ = jobState(one.Jobs["bad"])
	require.Equal(t, "discarded", state)
	require.Equal(t, TaskCancelled, got["bad-next"].State, "cancelled by its dependency's failure (policy cancel)")
	state, _ = jobState(one.Jobs["bad-next"])
	require.Equal(t, "cancelled", state)

	sum, err := client.Summary(ctx, one.ID)
	require.NoError(t, err)
	require.Equal(t, StatusRunning, sum.Status)
	require.Equal(t, Counts{Pending: 1, Active: 2, Completed: 1, Failed: 1, Cancelled: 1}, sum.Counts)

	got = tasks(cancelled.ID)
	require.Equal(t, TaskCompleted, got["late"].State, "the work happened: recorded although the task was cancelled")
	require.JSONEq(t, `3`, string(got["late"].Output))
	state, _ = jobState(cancelled.Jobs["late"])
	require.Equal(t, "running", state, "left to River's completer")
	require.Equal(t, TaskCancelled, got["late-next"].State, "its dependent heard of the cancel already")
	state, _ = jobState(cancelled.Jobs["late-next"])
	require.Equal(t, "cancelled", state)
	sum, err = client.Summary(ctx, cancelled.ID)
	require.NoError(t, err)
	require.Equal(t, StatusCancelled, sum.Status)
	require.Equal(t, Counts{Completed: 1, Cancelled: 1}, sum.Counts)
}

// TestCompletionStatementRunsItsGenericPlan commits a connection's first
// completion batch and reads what Postgres did with the completion
// statement: planned once, generically (no custom plan, which cost more
// CPU than running it, record 0043), and the transaction's later
// statements were back under the session's plan_cache_mode.
func TestCompletionStatementRunsItsGenericPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := clientOn(t, db)
	idle := &TaskOpts{InsertOpts: &river.InsertOpts{Queue: "idle"}}
	wf := New("one", nil)
	wf.Add("a", idleArgs{}, idle)
	wf.Add("b", idleArgs{}, &TaskOpts{Deps: []string{"a"}, InsertOpts: idle.InsertOpts})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`), res.Jobs["a"])
	require.NoError(t, err)

	// One connection: the completion's statements are prepared on it.
	cfg := db.Pool.Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	coord, err := NewCoordinator(pool, CoordinatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	now := time.Now().UTC()
	req := &request{jobCtx: ctx, job: &rivertype.JobRow{ID: res.Jobs["a"], Attempt: 1}, jobState: rivertype.JobStateCompleted,
		outcome: outcome{WorkflowID: res.ID, Task: "a", JobID: res.Jobs["a"], State: TaskCompleted, Attempt: 1, StartedAt: &now}}
	require.NoError(t, coord.completer.commitTx(ctx, []*request{req}))
	require.Equal(t, int64(1), coord.Stats().Completed)

	var generic, custom int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		coord.sql.completeRelease).Scan(&generic, &custom))
	require.Equal(t, int64(1), generic, "the completion statement ran its generic plan")
	require.Zero(t, custom, "the completion statement was never planned for its parameters")

	var mode string
	require.NoError(t, pgx.BeginTxFunc(ctx, pool, completionTx, func(tx pgx.Tx) error {
		a := newAdvance(tx, &coord.sql, db.Schema, now)
		a.lock = []string{res.ID}
		// Nothing to record (the task is completed): the round trip runs,
		// and the setting it changed is back after it.
		if _, _, err := a.completeFinish(ctx, []riverjob.Attempt{{ID: res.Jobs["a"], Attempt: 1}}, []outcome{req.outcome}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode)
	}))
	require.Equal(t, "auto", mode)
}
