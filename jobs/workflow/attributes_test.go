package workflow_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// attrArgs is a task that sets attributes of its workflow.
type attrArgs struct {
	Set map[string]string `json:"set"`
}

func (attrArgs) Kind() string { return "wftest.attr" }

type attrWorker struct {
	river.WorkerDefaults[attrArgs]
}

func (attrWorker) Work(ctx context.Context, job *river.Job[attrArgs]) error {
	return workflow.SetAttributes(ctx, job.Args.Set)
}

func TestAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, attrWorker{})
		require.NoError(t, coord.Register(rt))
	})
	client := workflow.NewClient(rt.Client)

	insert := func(attrs map[string]string, set map[string]string) string {
		t.Helper()
		wf := workflow.New("attr", &workflow.Opts{Attributes: attrs})
		wf.Add("set", attrArgs{Set: set}, nil)
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		return res.ID
	}
	a := insert(map[string]string{"customer": "c-42", "region": "eu"}, map[string]string{"invoice": "inv-1"})
	b := insert(map[string]string{"customer": "c-42", "region": "us"}, map[string]string{"region": "eu"}) // the task moves it
	c := insert(map[string]string{"customer": "c-7", "region": "eu"}, nil)
	for _, id := range []string{a, b, c} {
		_, err := client.Await(ctx, id)
		require.NoError(t, err)
	}

	list := func(attrs map[string]string) []string {
		t.Helper()
		res, err := client.List(ctx, workflow.ListParams{Attributes: attrs})
		require.NoError(t, err)
		var ids []string
		for _, s := range res.Workflows {
			ids = append(ids, s.ID)
		}
		return ids
	}
	require.Equal(t, []string{b, a}, list(map[string]string{"customer": "c-42"}), "newest first")
	require.Equal(t, []string{b, a}, list(map[string]string{"customer": "c-42", "region": "eu"}), "ANDed; b's task set region=eu")
	require.Equal(t, []string{a}, list(map[string]string{"invoice": "inv-1"}), "set by the task")
	require.Empty(t, list(map[string]string{"customer": "c-7", "region": "us"}))

	d, err := client.Get(ctx, a)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"customer": "c-42", "region": "eu", "invoice": "inv-1"}, d.Attributes)

	counts, err := client.CountByStatus(ctx, workflow.ListParams{Attributes: map[string]string{"region": "eu"}}, 100)
	require.NoError(t, err)
	require.Equal(t, int64(3), counts[workflow.StatusCompleted].N)
	require.Zero(t, counts[workflow.StatusFailed].N)
	require.False(t, counts[workflow.StatusCompleted].Approximate)
	capped, err := client.CountByStatus(ctx, workflow.ListParams{Attributes: map[string]string{"region": "eu"}}, 2)
	require.NoError(t, err)
	require.True(t, capped[workflow.StatusCompleted].Approximate)

	require.NoError(t, client.SetAttributes(ctx, c, map[string]string{"customer": "c-8"}))
	require.Equal(t, []string{c}, list(map[string]string{"customer": "c-8"}))

	// Refused before anything is written.
	bad := workflow.New("attr", &workflow.Opts{Attributes: map[string]string{"a=b": "x"}})
	bad.Add("set", attrArgs{}, nil)
	_, err = client.Insert(ctx, bad)
	require.ErrorIs(t, err, workflow.ErrInvalidWorkflow)
	require.ErrorContains(t, err, `"a=b"`)
	many := map[string]string{}
	for i := range workflow.MaxAttributes {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	err = client.SetAttributes(ctx, c, many)
	require.ErrorIs(t, err, workflow.ErrLimit, "32 new keys beside the one it has")
}
