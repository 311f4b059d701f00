package tributary_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
)

// TestAppLimits: an App with Config.Limits inserts its limited jobs
// pending, marked, and its runtime admits and works them; other jobs are
// inserted available as before.
func TestAppLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	app, err := tributary.New(db.Pool, tributary.Config{
		Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 5},
		Limits: []limits.Limit{{Name: "pings", Kind: pingArgs{}.Kind(), KeyArg: "n", Max: 1}},
	})
	require.NoError(t, err)
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[pingArgs]) error { return nil }))

	res, err := app.Enqueue(ctx, pingArgs{N: 7}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(res.Job.State), "a limited job waits for admission")
	require.JSONEq(t, `{"tributary_limit":"pings","tributary_limit_key":"7"}`, string(res.Job.Metadata))
	other, err := app.Enqueue(ctx, otherArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, "available", string(other.Job.State))

	_, err = app.Migrate(ctx)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the limited job admitted and completed", func() (bool, error) {
		var state string
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text FROM /*schema*/river_job WHERE id = $1`), res.Job.ID).Scan(&state)
		return state == "completed", err
	})
	all, err := limits.List(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "pings", all[0].Name)
}

type otherArgs struct{}

func (otherArgs) Kind() string { return "test.other" }

// TestAppConsumerMaxHandlers: the App declares the cap of a consumer of
// Config.Consumers as the limit "consumer:NAME" (with no Config.Limits),
// and refuses a limit of Config.Limits that has that name.
func TestAppConsumerMaxHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	capped, err := events.NewConsumer(events.ConsumerConfig{Name: "capped", MaxHandlers: 3})
	require.NoError(t, err)
	require.NoError(t, capped.Subscribe(events.Handle(pinged, func(context.Context, events.Message[pingArgs]) error { return nil })))
	cfg := tributary.Config{Schema: db.Schema, Logger: pgtest.Logger(t), Consumers: []*events.Consumer{capped}}

	clash := cfg
	clash.Limits = []limits.Limit{{Name: "consumer:capped", Kind: "x", Max: 1}}
	_, err = tributary.New(db.Pool, clash)
	require.ErrorContains(t, err, "Consumers[0].MaxHandlers")

	app, err := tributary.New(db.Pool, cfg)
	require.NoError(t, err)
	_, err = app.Migrate(ctx)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	all, err := limits.List(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "consumer:capped", all[0].Name)
	require.Equal(t, 3, all[0].Max)
	var limitName string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT limit_name FROM /*schema*/tributary_event_consumer WHERE name = 'capped'`)).Scan(&limitName))
	require.Equal(t, "consumer:capped", limitName)
}

type blockArgs struct {
	N int `json:"n"`
}

func (blockArgs) Kind() string { return "test.block" }

// TestAppWorkflowKeyOverride: an App without Config.Limits still runs the
// admitter of workflow concurrency keys: `limits set workflow:KEY 2`
// admits the key's queued workflow while the first one runs.
func TestAppWorkflowKeyOverride(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	app, err := tributary.New(db.Pool, tributary.Config{Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 5}})
	require.NoError(t, err)
	started, release := make(chan int, 2), make(chan struct{})
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[blockArgs]) error {
		started <- job.Args.N
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	t.Cleanup(func() { close(release) }) // before the stop
	for i := range 2 {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "tenant-1"})
		wf.Add("t", blockArgs{N: i}, nil)
		res, err := app.Workflows().Insert(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, i == 1, res.Queued)
	}
	require.Equal(t, 0, <-started)
	require.NoError(t, limits.SetMax(ctx, db.Pool, db.Schema, "workflow:tenant-1", 2))
	select {
	case n := <-started:
		require.Equal(t, 1, n)
	case <-time.After(30 * time.Second):
		t.Fatal("the queued workflow did not start after the override")
	}
}
