package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// setupKeyLimits is setup with a limits admitter that admits workflow
// concurrency keys (limits.Config.Holders), as the App's processes have.
func setupKeyLimits(t *testing.T) (*testBundle, *limits.Admitter) {
	t.Helper()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	lim, err := limits.New(limits.Config{Schema: db.Schema, Logger: pgtest.Logger(t), PollInterval: 100 * time.Millisecond,
		Holders: []limits.HolderAdmitter{workflow.LimitHolder(db.Schema)}})
	require.NoError(t, err)
	w := newStepWorker()
	var adm *limits.Admitter
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, w)
		require.NoError(t, coord.Register(rt))
		adm, err = lim.Register(rt)
		require.NoError(t, err)
	})
	return &testBundle{db: db, client: workflow.NewClient(rt.Client), coord: coord, rt: rt, worker: w}, adm
}

// insertKeyed inserts n workflows of key with limit, each one waiting step
// named prefix and its index, and returns their ids.
func insertKeyed(t *testing.T, b *testBundle, key string, limit, n int, prefix string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: key, ConcurrencyLimit: limit})
		wf.Add("t", stepArgs{Name: fmt.Sprint(prefix, i), Wait: true}, nil)
		res, err := b.client.Insert(context.Background(), wf)
		require.NoError(t, err)
		ids[i] = res.ID
	}
	return ids
}

func limitStatus(t *testing.T, db *pgtest.DB, name string) limits.Status {
	t.Helper()
	all, err := limits.List(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	for _, s := range all {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no limit %q in %v", name, all)
	return limits.Status{}
}

// TestWorkflowKeyLimitListed: a workflow concurrency key is the limit
// "workflow:KEY" in limits.List (`tributary limits list`, /api/limits)
// with its admitted workflows as used and its queued ones as waiting, the
// oldest named; the admitter's Stats (the metrics) say the same; only its
// max can be overridden.
func TestWorkflowKeyLimitListed(t *testing.T) {
	t.Parallel()
	b, adm := setupKeyLimits(t)
	ctx := context.Background()
	ids := insertKeyed(t, b, "customer-7", 1, 3, "listed")
	require.Equal(t, "listed0", nextStarted(t, b, "listed"))

	st := limitStatus(t, b.db, "workflow:customer-7")
	require.Equal(t, limits.HolderWorkflows, st.Holder)
	require.Equal(t, 1, st.Max)
	require.Equal(t, 1, st.DeclaredMax)
	require.Equal(t, 1, st.Used)
	require.Equal(t, 2, st.Waiting)
	require.Equal(t, ids[1], st.OldestWaitingWorkflowID)
	require.NotNil(t, st.OldestWaitingSince)
	pgtest.WaitFor(t, 30*time.Second, "the admitter's stats of the key", func() (bool, error) {
		s := adm.Stats()["workflow:customer-7"]
		return s.Max == 1 && s.Used == 1 && s.Waiting == 2, nil
	})

	total := 2
	require.ErrorIs(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "workflow:customer-7", limits.Override{Total: &total}), limits.ErrNotOverridable)
	require.ErrorContains(t, limits.Limit{Name: "workflow:x", Max: 1}.Validate(), `the prefix "workflow:"`)
	require.NoError(t, limits.ValidateName("workflow:a key/with spaces"))
	for i := range ids {
		b.worker.Release(fmt.Sprint("listed", i))
	}
	for _, id := range ids {
		b.waitStatus(t, id, workflow.StatusCompleted)
	}
	st = limitStatus(t, b.db, "workflow:customer-7")
	require.Zero(t, st.Used)
	require.Zero(t, st.Waiting)
}

// TestWorkflowKeyLimitSet: `limits set workflow:KEY 3` admits the key's
// queued workflows at once, with no workflow of the key finishing;
// lowering it to 1 stops none of the three running, and a new workflow
// waits until all three finished.
func TestWorkflowKeyLimitSet(t *testing.T) {
	t.Parallel()
	b, _ := setupKeyLimits(t)
	ctx := context.Background()
	ids := insertKeyed(t, b, "k", 1, 3, "set")
	require.Equal(t, "set0", nextStarted(t, b, "set"))

	require.NoError(t, limits.SetMax(ctx, b.db.Pool, b.db.Schema, "workflow:k", 3))
	require.ElementsMatch(t, []string{"set1", "set2"}, []string{nextStarted(t, b, "set"), nextStarted(t, b, "set")})
	st := limitStatus(t, b.db, "workflow:k")
	require.Equal(t, 3, st.Max)
	require.Equal(t, 1, st.DeclaredMax)
	require.Equal(t, 3, st.Used)

	require.NoError(t, limits.SetMax(ctx, b.db.Pool, b.db.Schema, "workflow:k", 1))
	late := insertKeyed(t, b, "k", 1, 1, "late")
	for _, id := range ids {
		d, err := b.client.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusRunning, d.Status, "lowering the limit stops nothing")
	}
	st = limitStatus(t, b.db, "workflow:k")
	require.Equal(t, 3, st.Used)
	require.Equal(t, 1, st.Waiting)
	for i := range 2 {
		b.worker.Release(fmt.Sprint("set", i))
		b.waitStatus(t, ids[i], workflow.StatusCompleted)
		require.Equal(t, 1, limitStatus(t, b.db, "workflow:k").Waiting, "workflow %d finished: two over the max of 1 are left", i)
	}
	b.worker.Release("set2")
	require.Equal(t, "late0", nextStarted(t, b, "late"))
	b.worker.Release("late0")
	b.waitStatus(t, late[0], workflow.StatusCompleted)
	require.NoError(t, limits.ResetMax(ctx, b.db.Pool, b.db.Schema, "workflow:k"))
}

// TestWorkflowKeyLimitAcrossRuntimes runs 24 workflows of one key (two
// 20 ms tasks each) under ConcurrencyLimit 2 on two runtimes of 10
// workers, sampling continuously: never more than 2 admitted and running,
// nor more than 2 of their tasks released (a job's row may stay running
// until River's batched completion after its task is recorded), no job of
// a queued workflow out of pending; after `limits set`
// raised the key to 3 mid-run, never more than 3, and every workflow
// completed.
func TestWorkflowKeyLimitAcrossRuntimes(t *testing.T) {
	t.Parallel()
	const (
		limit     = 2
		raised    = 3
		workflows = 24
	)
	db := pgtest.New(t)
	ctx := context.Background()
	client, _ := startLimitedRuntime(t, db, nil)
	startLimitedRuntime(t, db, nil)
	for i := range workflows {
		wf := workflow.New(fmt.Sprint("keyed-", i), &workflow.Opts{ConcurrencyKey: "shared", ConcurrencyLimit: limit})
		wf.Add("a", limitedArgs{Name: "a", MS: 20}, nil)
		wf.Add("b", limitedArgs{Name: "b", MS: 20}, &workflow.TaskOpts{Deps: []string{"a"}})
		_, err := client.Insert(ctx, wf)
		require.NoError(t, err)
	}
	bound, samples, most := limit, 0, [2]int{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var admitted, active, queuedJobs, completed int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT (SELECT count(*) FROM /*schema*/tributary_workflow WHERE concurrency_key = 'shared' AND status = 'running' AND NOT queued),
       (SELECT count(*) FROM /*schema*/tributary_workflow_task WHERE state = 'active'),
       (SELECT count(*) FROM /*schema*/tributary_workflow w JOIN /*schema*/tributary_workflow_task t ON t.workflow_id = w.id
        JOIN /*schema*/river_job j ON j.id = t.job_id WHERE w.queued AND j.state NOT IN ('pending', 'cancelled')),
       (SELECT count(*) FROM /*schema*/tributary_workflow WHERE status = 'completed')`)).Scan(&admitted, &active, &queuedJobs, &completed))
		samples++
		require.LessOrEqual(t, admitted, bound, "workflows admitted at once (sample %d)", samples)
		require.LessOrEqual(t, active, bound, "tasks released at once (sample %d)", samples)
		require.Zero(t, queuedJobs, "a queued workflow's job left pending (sample %d)", samples)
		i := 0
		if bound == raised {
			i = 1
		}
		most[i] = max(most[i], admitted)
		if completed == workflows {
			break
		}
		if bound == limit && completed >= workflows/2 {
			require.NoError(t, limits.SetMax(ctx, db.Pool, db.Schema, "workflow:shared", raised))
			bound = raised
		}
		require.True(t, time.Now().Before(deadline), "only %d of %d workflows completed", completed, workflows)
	}
	t.Logf("%d workflows of one key on 2 runtimes: %d samples, most admitted at once %d under %d, %d after the raise to %d",
		workflows, samples, most[0], limit, most[1], raised)
	require.Equal(t, raised, most[1], "the raise let a third workflow in")
}

// TestWorkflowKeyMigration: a workflow queued under the counter table of
// migration 0012 (which 0036's down migration rebuilds, counting the
// admitted workflow) is admitted after migrating up, when the workflow
// holding its key's slot finishes.
func TestWorkflowKeyMigration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := workflow.NewClient(db.Client(t))
	var ids []string
	for i := range 2 {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "old-key", ConcurrencyLimit: 1})
		wf.Add("t", stepArgs{Name: fmt.Sprint("migrated", i), Wait: true}, nil)
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, i == 1, res.Queued)
		ids = append(ids, res.ID)
	}

	m, err := migrations.New(db.Pool, migrations.Config{Schema: db.Schema})
	require.NoError(t, err)
	for {
		st, err := m.Status(ctx)
		require.NoError(t, err)
		if pending(st, 36) {
			break
		}
		_, err = m.Down(ctx)
		require.NoError(t, err)
	}
	var running int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT running FROM /*schema*/tributary_workflow_concurrency WHERE key = 'old-key'`)).Scan(&running))
	require.Equal(t, 1, running, "the old counter holds the admitted workflow")

	_, err = m.Up(ctx)
	require.NoError(t, err)
	var declared int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT declared_max FROM /*schema*/tributary_limit WHERE name = 'workflow:old-key' AND holder = 'workflows'`)).Scan(&declared))
	require.Equal(t, 1, declared)
	st := limitStatus(t, db, "workflow:old-key")
	require.Equal(t, 1, st.Used)
	require.Equal(t, 1, st.Waiting)

	b := setupOn(t, db, workflow.CoordinatorConfig{})
	require.Equal(t, "migrated0", nextStarted(t, b, "migrated"))
	b.worker.Release("migrated0")
	require.Equal(t, "migrated1", nextStarted(t, b, "migrated"))
	b.worker.Release("migrated1")
	b.waitStatus(t, ids[1], workflow.StatusCompleted)
}

func pending(st *migrations.Status, version int) bool {
	for _, s := range st.Pending {
		if s.Line == "tributary" && s.Version == version {
			return true
		}
	}
	return false
}
