package demoworkflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type bundle struct {
	db     *pgtest.DB
	reg    *workflow.Registry
	client *workflow.Client
	steps  chan string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	b := &bundle{db: db, reg: workflow.NewRegistry(), steps: make(chan string, 100)}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		require.NoError(t, demoworkflows.RegisterWorkflowsII(b.reg, rt, demoworkflows.WorkflowsIIConfig{
			StepFunc: func(ctx context.Context, tx pgx.Tx, wf, step string) error { b.steps <- step; return nil },
		}))
		require.NoError(t, coord.Register(rt))
	})
	b.client = workflow.NewClient(rt.Client)
	return b
}

func (b *bundle) wait(t *testing.T, id string, st workflow.Status) *workflow.Details {
	t.Helper()
	var d *workflow.Details
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("workflow %s %s", id, st), func() (bool, error) {
		var err error
		d, err = b.client.Get(context.Background(), id)
		return err == nil && d.Status == st, err
	})
	return d
}

func TestApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Start(ctx, b.reg, "demo.approval", json.RawMessage(`{"timeout":"30s"}`), nil)
	require.NoError(t, err)
	require.Equal(t, "request", <-b.steps)
	_, err = b.client.Signal(ctx, res.ID, "approve", map[string]string{"by": "ops"}, nil)
	require.NoError(t, err)
	d := b.wait(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, "decide", <-b.steps)
	var out demoworkflows.ApprovalOutput
	require.NoError(t, json.Unmarshal(d.Tasks[0].Output, &out))
	require.True(t, out.Approved)
	require.JSONEq(t, `{"by":"ops"}`, string(out.Signal))

	short, err := b.client.Start(ctx, b.reg, "demo.approval", json.RawMessage(`{"timeout":"200ms"}`), nil)
	require.NoError(t, err)
	d = b.wait(t, short.ID, workflow.StatusCompleted)
	require.NoError(t, json.Unmarshal(d.Tasks[0].Output, &out))
	require.False(t, out.Approved, "timed out")

	_, err = b.client.Start(ctx, b.reg, "demo.approval", json.RawMessage(`{"timeout":"soon"}`), nil)
	require.ErrorContains(t, err, `invalid timeout "soon"`)
	_, err = b.client.Start(ctx, b.reg, "demo.approval", json.RawMessage(`{"timout":"1s"}`), nil)
	require.ErrorContains(t, err, `unknown field "timout"`)
}

func TestExpand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 20
	res, err := b.client.Start(ctx, b.reg, "demo.expand", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), nil)
	require.NoError(t, err)
	d := b.wait(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: n + 2}, d.Counts)
	for _, task := range d.Tasks {
		if task.Name == "sum" {
			require.JSONEq(t, fmt.Sprintf(`{"sum":%d,"n":%d}`, n*(n-1)/2, n), string(task.Output))
		}
	}
	_, err = b.client.Start(ctx, b.reg, "demo.expand", json.RawMessage(`{"n":0}`), nil)
	require.ErrorContains(t, err, "invalid n 0")
}
