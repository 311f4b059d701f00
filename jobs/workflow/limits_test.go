package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// limitedArgs is a task that works for MS milliseconds.
type limitedArgs struct {
	Name string `json:"name"`
	MS   int    `json:"ms"`
}

func (limitedArgs) Kind() string { return "wftest.limited" }

type limitedWorker struct {
	river.WorkerDefaults[limitedArgs]
}

func (limitedWorker) Work(ctx context.Context, job *river.Job[limitedArgs]) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(job.Args.MS) * time.Millisecond):
		return nil
	}
}

// startLimitedRuntime starts a runtime on db with the coordinator, the
// limits' middleware and admitter for lims (which admits workflow
// concurrency keys too), and the limited worker, as a
// worker process of the front door has them; it returns its workflow
// client and coordinator.
func startLimitedRuntime(t *testing.T, db *pgtest.DB, lims []limits.Limit) (*workflow.Client, *workflow.Coordinator) {
	t.Helper()
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	lim, err := limits.New(limits.Config{Limits: lims, Schema: db.Schema, Logger: pgtest.Logger(t),
		Holders: []limits.HolderAdmitter{workflow.LimitHolder(db.Schema)}})
	require.NoError(t, err)
	rcfg := queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware(), lim.Middleware()}}
	rt := pgtest.StartRuntime(t, db, rcfg, func(rt *queue.Runtime) {
		queue.AddWorker(rt, limitedWorker{})
		require.NoError(t, coord.Register(rt))
		_, err := lim.Register(rt)
		require.NoError(t, err)
	})
	return workflow.NewClient(rt.Client), coord
}

// TestTaskLimitKeyAcrossRuntimes runs 12 diamond workflows whose tasks
// all share one limit key (TaskOpts.LimitKey) under a limit of 2, on two
// runtimes with 10 workers each, and samples the tasks' jobs until every
// workflow completed: never more than 2 run (or hold a slot) at once,
// and every task's job, the dependents released later as much as the
// first tasks, went through the limit.
func TestTaskLimitKeyAcrossRuntimes(t *testing.T) {
	t.Parallel()
	const (
		maxRunning = 2
		workflows  = 12
		tasks      = workflows * 4
	)
	db := pgtest.New(t)
	ctx := context.Background()
	lims := []limits.Limit{{Name: "wf-tasks", Kind: limitedArgs{}.Kind(), KeyArg: "name", Max: maxRunning}}
	client, coord1 := startLimitedRuntime(t, db, lims)
	_, coord2 := startLimitedRuntime(t, db, lims)

	opts := func(deps ...string) *workflow.TaskOpts {
		return &workflow.TaskOpts{Deps: deps, LimitKey: "shared"}
	}
	ids := make([]string, workflows)
	for i := range ids {
		wf := workflow.New(fmt.Sprint("limited-", i), nil)
		wf.Add("a", limitedArgs{Name: "a", MS: 20}, opts())
		wf.Add("b", limitedArgs{Name: "b", MS: 20}, opts("a"))
		wf.Add("c", limitedArgs{Name: "c", MS: 20}, opts("a"))
		wf.Add("d", limitedArgs{Name: "d", MS: 20}, opts("b", "c"))
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		ids[i] = res.ID
	}

	var samples, maxSeen int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var running, holding, completed int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state IN ('available', 'running')),
       (SELECT count(*) FROM /*schema*/tributary_workflow WHERE status = 'completed')
FROM /*schema*/river_job WHERE kind = $1`), limitedArgs{}.Kind()).Scan(&running, &holding, &completed))
		samples++
		maxSeen = max(maxSeen, running)
		require.LessOrEqual(t, running, maxRunning, "tasks running at once (sample %d)", samples)
		require.LessOrEqual(t, holding, maxRunning, "tasks running or available at once (sample %d)", samples)
		if completed == workflows {
			break
		}
		require.True(t, time.Now().Before(deadline), "only %d of %d workflows completed", completed, workflows)
	}
	var limited int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT count(*) FROM /*schema*/river_job
WHERE kind = $1 AND state = 'completed' AND metadata ->> 'tributary_limit' = 'wf-tasks' AND metadata ->> 'tributary_limit_key' = 'shared'`),
		limitedArgs{}.Kind()).Scan(&limited))
	require.Equal(t, tasks, limited, "every task's job completed under the limit and key")
	// The coordinators recorded every outcome themselves: none was dropped
	// for a job completed before its outcome's transaction (the limits'
	// early completion), left to the repair sweep.
	// (The counters move after each completion's commit.)
	pgtest.WaitFor(t, 10*time.Second, "the coordinators' counts of completions", func() (bool, error) {
		return coord1.Stats().Completed+coord2.Stats().Completed == tasks, nil
	})
	require.Zero(t, coord1.Stats().Stale+coord2.Stats().Stale, "outcomes dropped")
	t.Logf("%d workflows, %d tasks of one limit key, limit %d, 2 runtimes: %d samples, most running at once %d", workflows, tasks, maxRunning, samples, maxSeen)
}

// TestTaskLimitAsked checks what a task's Limit and LimitKey write: the
// named limit governs the task whatever its kind, a first task waits for
// admission at once, a dependent carries its limit for its release; an
// undeclared limit, or a key no limit governs, fails the insert.
func TestTaskLimitAsked(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client, _ := startLimitedRuntime(t, db, []limits.Limit{{Name: "named", Queue: "idle", Max: 1}})

	wf := workflow.New("asked", nil)
	wf.Add("a", limitedArgs{Name: "a"}, &workflow.TaskOpts{Limit: "named", LimitKey: "k", InsertOpts: idleQueue()})
	wf.Add("b", limitedArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}, Limit: "named", LimitKey: "k", InsertOpts: idleQueue()})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	meta := func(task string) (state, limit, onRelease, key string) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT state::text, coalesce(metadata ->> 'tributary_limit', ''), coalesce(metadata ->> 'tributary_limit_on_release', ''),
       coalesce(metadata ->> 'tributary_limit_key', '')
FROM /*schema*/river_job WHERE id = $1`), res.Jobs[task]).Scan(&state, &limit, &onRelease, &key))
		return
	}
	// The first task enters pending, and the running admitter may have
	// admitted it already (its queue is not worked, so it stays
	// available): either way it carries the named limit and its key, and
	// it is admitted.
	state, limit, onRelease, key := meta("a")
	require.Contains(t, []string{"pending", "available"}, state, "the first task waits for admission or was admitted")
	require.Equal(t, []string{"named", "", "k"}, []string{limit, onRelease, key}, "the first task's limit and key")
	pgtest.WaitFor(t, 30*time.Second, "the first task's admission", func() (bool, error) {
		state, _, _, _ := meta("a")
		return state == "available", nil
	})
	state, limit, onRelease, key = meta("b")
	require.Equal(t, []string{"pending", "", "named", "k"}, []string{state, limit, onRelease, key}, "the dependent carries its limit for its release")

	undeclared := workflow.New("undeclared", nil)
	undeclared.Add("a", limitedArgs{Name: "a"}, &workflow.TaskOpts{Limit: "nope"})
	_, err = client.Insert(ctx, undeclared)
	require.ErrorContains(t, err, `asks for limit "nope", which is not declared`)

	ungoverned := workflow.New("ungoverned", nil)
	ungoverned.Add("a", limitedArgs{Name: "a"}, &workflow.TaskOpts{LimitKey: "k"})
	_, err = client.Insert(ctx, ungoverned)
	require.ErrorContains(t, err, `asks for limit key "k", and no declared limit governs it`)
}

// TestRepairLeavesTasksWaitingForLimit: an active task whose job waits
// for its limit's admission (pending) is not a lost release, and the
// repair sweep leaves it alone.
func TestRepairLeavesTasksWaitingForLimit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client, coord := startLimitedRuntime(t, db, []limits.Limit{{Name: "idle-one", Queue: "idle", Max: 1}})
	insert := func() *workflow.InsertResult {
		wf := workflow.New("waits", nil)
		wf.Add("a", limitedArgs{Name: "a"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		return res
	}
	first, second := insert(), insert()
	jobState := func(id int64) (state string) {
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT state::text FROM /*schema*/river_job WHERE id = $1`), id).Scan(&state))
		return state
	}
	// Nobody works queue idle: the first holds the slot, the second waits.
	pgtest.WaitFor(t, 10*time.Second, "the first task admitted", func() (bool, error) {
		return jobState(first.Jobs["a"]) == "available", nil
	})
	require.Equal(t, "pending", jobState(second.Jobs["a"]))
	_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow_task SET updated_at = updated_at - interval '1 minute'`))
	require.NoError(t, err)
	changed, err := coord.Repair(ctx)
	require.NoError(t, err)
	require.Zero(t, changed, "tasks the repair sweep changed")
	require.Equal(t, "pending", jobState(second.Jobs["a"]))
}

// TestTaskLimitScheduledRelease: a task released before its ScheduledAt
// becomes scheduled, and River's scheduler makes it available when it is
// due: the door stops it there too, and it runs admitted, under its limit.
func TestTaskLimitScheduledRelease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client, _ := startLimitedRuntime(t, db, []limits.Limit{{Name: "later", Kind: limitedArgs{}.Kind(), Max: 1}})
	wf := workflow.New("later", nil)
	wf.Add("a", limitedArgs{Name: "a"}, nil)
	wf.Add("b", limitedArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"},
		InsertOpts: &river.InsertOpts{ScheduledAt: time.Now().Add(2 * time.Second)}})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "the workflow completed", func() (bool, error) {
		d, err := client.Get(ctx, res.ID)
		return err == nil && d.Status == workflow.StatusCompleted, err
	})
	var limit, onRelease string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT coalesce(metadata ->> 'tributary_limit', ''), coalesce(metadata ->> 'tributary_limit_on_release', '')
FROM /*schema*/river_job WHERE id = $1`), res.Jobs["b"]).Scan(&limit, &onRelease))
	require.Equal(t, []string{"later", ""}, []string{limit, onRelease}, "the scheduled task's job ran under its limit")
}
