package tributary_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

type pingArgs struct {
	N int `json:"n"`
}

func (pingArgs) Kind() string { return "test.ping" }

var pinged = events.Define[pingArgs]("test.pinged", nil)

func newConsumer(t *testing.T, name, q string, fn events.HandlerFunc[pingArgs]) *events.Consumer {
	t.Helper()
	c, err := events.NewConsumer(events.ConsumerConfig{Name: name, Queue: q})
	require.NoError(t, err)
	events.On(c, pinged, fn)
	return c
}

// TestValidateNamesFieldAndValue: one validation, whose errors name the
// field (with its path) and the value.
func TestValidateNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	noop := func(ctx context.Context, m events.Message[pingArgs]) error { return nil }
	for _, tc := range []struct {
		field, value string
		cfg          tributary.Config
	}{
		{"Schema", "bad;schema", tributary.Config{Schema: "bad;schema"}},
		{"Queues", "default=0", tributary.Config{Queues: map[string]int{"default": 0}}},
		{"Queues", "default=5", tributary.Config{Queues: map[string]int{"default": 5}, Consumers: []*events.Consumer{newConsumer(t, "c1", "events", noop)}}},
		{"Runtime.LivenessTimeout", "500ms", tributary.Config{Runtime: queue.RuntimeConfig{LivenessTimeout: 500 * time.Millisecond}}},
		{"Runtime.Queues", "map[a:1]", tributary.Config{Runtime: queue.RuntimeConfig{Queues: map[string]int{"a": 1}}}},
		{"LogLevel", "loud", tributary.Config{LogLevel: "loud"}},
		{"Schedules[0].Spec", "every hour", tributary.Config{Schedules: []scheduler.Schedule{{Name: "s", Spec: "every hour", Args: pingArgs{}}}}},
		{"Schedules[1].Name", "s", tributary.Config{Schedules: []scheduler.Schedule{{Name: "s", Spec: "@every 1m", Args: pingArgs{}}, {Name: "s", Spec: "@every 1m", Args: pingArgs{}}}}},
		{"Limits[0]", "l", tributary.Config{Limits: []limits.Limit{{Name: "l", Max: 0}}}},
		{"Limits[1].Name", "l", tributary.Config{Limits: []limits.Limit{{Name: "l", Max: 1}, {Name: "l", Max: 2}}}},
		{"Batch.SinkURL", "ftp://x", tributary.Config{Batch: tributary.BatchConfig{SinkURL: "ftp://x"}}},
		{"Cleanup.ArchiveWorkflows", "true", tributary.Config{Cleanup: tributary.CleanupConfig{ArchiveWorkflows: true}}},
		{"AMQP.OutboxExchange", "events", tributary.Config{AMQP: tributary.AMQPConfig{OutboxExchange: "events"}}},
		{"AMQP.Bridge.RetryMax", "1s", tributary.Config{AMQP: tributary.AMQPConfig{Bridge: amqpbridge.Config{URL: "amqp://127.0.0.1/", RetryBase: 5 * time.Second, RetryMax: time.Second}}}},
		{"Dashboard.Addr", "nope:nope:nope", tributary.Config{Dashboard: tributary.DashboardConfig{Addr: "nope:nope:nope"}}},
		{"Tracing.OTLPEndpoint", "ftp://collector", tributary.Config{Tracing: tributary.TracingConfig{OTLPEndpoint: "ftp://collector"}}},
	} {
		err := tc.cfg.Validate()
		var ce *queue.ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v", tc.field, err)
		require.Equal(t, tc.field, ce.Name, "%v", err)
		require.Contains(t, ce.Value, tc.value, "%v", err)
		_, err = tributary.New(pgtest.Pool(t), tc.cfg)
		require.ErrorAs(t, err, &ce, "New validates as Validate does")
	}
}

// TestQueuesDefault: plain jobs on "default", consumers on "events" unless
// they name a queue, and a queue a consumer names gets slots of its own.
func TestQueuesDefault(t *testing.T) {
	t.Parallel()
	noop := func(ctx context.Context, m events.Message[pingArgs]) error { return nil }
	app, err := tributary.New(pgtest.Pool(t), tributary.Config{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"default": tributary.QueueWorkersDefault, "events": tributary.ConsumerQueueWorkersDefault}, app.Config().Queues)

	app, err = tributary.New(pgtest.Pool(t), tributary.Config{Consumers: []*events.Consumer{
		newConsumer(t, "on-events", "", noop),
		newConsumer(t, "on-default", "default", noop),
		newConsumer(t, "on-own", "billing", noop),
	}})
	require.NoError(t, err)
	require.Equal(t, map[string]int{
		"default": tributary.QueueWorkersDefault,
		"events":  tributary.ConsumerQueueWorkersDefault,
		"billing": tributary.ConsumerQueueWorkersDefault,
	}, app.Config().Queues)
	require.Equal(t, app.Config().Queues, app.Runtime().Queues(), "the runtime works them")
}

// TestAppWithoutStart: a process that only enqueues, emits, starts
// workflows and stages builds its App the same way and never starts it;
// New reads nothing from the database.
func TestAppWithoutStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	_, err := tributary.New(pgtest.Pool(t), tributary.Config{Schema: "not_migrated_" + strings.ToLower(t.Name())})
	require.NoError(t, err, "New needs no migrated schema")

	db := pgtest.New(t)
	flows := workflow.NewRegistry()
	require.NoError(t, flows.Register("one", func(wf *workflow.Workflow, input json.RawMessage) error {
		wf.Add("only", pingArgs{N: 7}, nil)
		return nil
	}))
	app, err := tributary.New(db.Pool, tributary.Config{Schema: db.Schema, Logger: pgtest.Logger(t), Workflows: flows,
		Events: tributary.EventsConfig{Types: []events.Definition{pinged}}})
	require.NoError(t, err)
	_, err = app.StartWorkflow(ctx, "one", nil, nil)
	require.NoError(t, err)
	_, err = app.Enqueue(ctx, pingArgs{N: 1}, nil)
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := app.EnqueueTx(ctx, tx, pingArgs{N: 2}, nil); err != nil {
			return err
		}
		if _, err := app.EmitTx(ctx, tx, pinged, pingArgs{N: 2}, events.Meta{AggregateID: "a-1"}); err != nil {
			return err
		}
		wf := workflow.New("two", nil)
		wf.Add("a", pingArgs{N: 3}, nil)
		wf.Add("b", pingArgs{N: 4}, &workflow.TaskOpts{Deps: []string{"a"}})
		if _, err := app.Workflows().InsertTx(ctx, tx, wf); err != nil {
			return err
		}
		return app.StageTx(ctx, tx, "logs", []byte(`{"line":1}`))
	})
	require.NoError(t, err)
	ids, err := app.EmitMany(ctx, []events.Emission{{Def: pinged, Payload: pingArgs{N: 5}}, {Def: pinged, Payload: pingArgs{N: 6}}})
	require.NoError(t, err)
	require.Len(t, ids, 2)

	var jobs, outbox, workflows, staged int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT
		(SELECT count(*) FROM /*schema*/river_job WHERE kind = 'test.ping'),
		(SELECT count(*) FROM /*schema*/tributary_outbox),
		(SELECT count(*) FROM /*schema*/tributary_workflow),
		(SELECT count(*) FROM /*schema*/tributary_batch_chunk)`)).Scan(&jobs, &outbox, &workflows, &staged))
	require.Equal(t, []int{5, 3, 2, 1}, []int{jobs, outbox, workflows, staged}, "two jobs and the workflows' three tasks; three events; two workflows; a staged item")

	_, err = app.Emit(ctx, events.Define[pingArgs]("test.undeclared", nil), pingArgs{}, events.Meta{})
	require.ErrorIs(t, err, events.ErrUnknownEventType, "Emit takes the types of Config.Events.Types")
	require.Nil(t, app.AMQPPublisher(), "no publisher with the bridge off")
}

// TestAppRun: one App, from Open, works a job kind, runs an ordered
// consumer (whose event type Emit takes without Events.Types), advances a
// two-task workflow and fires a cron schedule, and stops cleanly.
func TestAppRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	var handled atomic.Int64
	consumer := newConsumer(t, "counter", "", func(ctx context.Context, m events.Message[pingArgs]) error {
		handled.Add(1)
		return nil
	})
	app, err := tributary.Open(ctx, tributary.Config{
		DatabaseURL: pgtest.DatabaseURL(), Schema: db.Schema, Logger: pgtest.Logger(t),
		Runtime:   queue.RuntimeConfig{FetchPollInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		Consumers: []*events.Consumer{consumer},
		Events:    tributary.EventsConfig{Forwarder: events.ForwarderConfig{PollInterval: 100 * time.Millisecond}},
		Schedules: []scheduler.Schedule{{Name: "test.every-second", Spec: "@every 1s", Args: pingArgs{N: 100}}},
	})
	require.NoError(t, err)
	var worked atomic.Int64
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[pingArgs]) error {
		worked.Add(1)
		return nil
	}))
	_, err = app.Migrate(ctx)
	require.NoError(t, err, "already migrated: nothing to do")

	wf := workflow.New("two", nil)
	wf.Add("a", pingArgs{N: 1}, nil)
	wf.Add("b", pingArgs{N: 2}, &workflow.TaskOpts{Deps: []string{"a"}})
	res, err := app.Workflows().Insert(ctx, wf)
	require.NoError(t, err)
	for i := range 3 {
		_, err = app.Emit(ctx, pinged, pingArgs{N: i}, events.Meta{AggregateID: "a-1"})
		require.NoError(t, err)
	}

	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	pgtest.WaitFor(t, 30*time.Second, "the workflow completes", func() (bool, error) {
		d, err := app.Workflows().Get(ctx, res.ID)
		return err == nil && d.Status == workflow.StatusCompleted, err
	})
	pgtest.WaitFor(t, 30*time.Second, "the consumer handles the three events", func() (bool, error) { return handled.Load() == 3, nil })
	pgtest.WaitFor(t, 30*time.Second, "the schedule fires", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'test.ping' AND (args->>'n')::int = 100 AND state = 'completed'`)).Scan(&n)
		return n > 0, err
	})
	require.GreaterOrEqual(t, worked.Load(), int64(3), "two tasks and a fire")
}

// TestOpenMigratesAndOwnsThePool: Open migrates a new schema, and Stop
// closes the pool it made, also for an App never started.
func TestOpenMigratesAndOwnsThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := "open_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	app, err := tributary.Open(ctx, tributary.Config{DatabaseURL: pgtest.DatabaseURL(), Schema: schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	_, err = app.Enqueue(ctx, pingArgs{N: 1}, nil)
	require.NoError(t, err, "migrated: River's tables are there")
	require.NoError(t, app.Stop(ctx))
	require.Error(t, app.Pool().Ping(ctx), "Stop closed the pool Open made")

	_, err = tributary.Open(ctx, tributary.Config{DatabaseURL: pgtest.DatabaseURL(), Schema: schema, Queues: map[string]int{"default": 0}})
	var ce *queue.ConfigError
	require.ErrorAs(t, err, &ce, "Open validates before it connects")
}

// TestAppStartNeedsMigrations: Start on a schema without tributary's
// tables says how to create them.
func TestAppStartNeedsMigrations(t *testing.T) {
	t.Parallel()
	app, err := tributary.New(pgtest.Pool(t), tributary.Config{Schema: "never_migrated_here", Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	err = app.Start(context.Background())
	require.ErrorContains(t, err, "pending migrations")
	require.ErrorContains(t, err, "Migrate")
}

// TestServiceContract: an App keeps the lifecycle every queue.Service
// keeps (a second Start refused, Stop without Start, twice, concurrently,
// under a cancelled context).
func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "tributary.App", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return tributary.New(db.Pool, tributary.Config{Schema: db.Schema, Logger: pgtest.Logger(t),
			Runtime: queue.RuntimeConfig{ShutdownTimeout: time.Second}})
	})
}

// TestOn: On adds a consumer with the default configuration, or a handler
// to a consumer of Config.Consumers, after New; Emit accepts their event
// types from then on, and the handlers run. On panics after Start, for an
// invalid name, and for a new consumer on a queue the App does not work.
func TestOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	shipped := events.Define[pingArgs]("test.shipped", nil)
	var billed, audited atomic.Int64
	audit := newConsumer(t, "audit", "", func(ctx context.Context, m events.Message[pingArgs]) error { return nil })
	app, err := tributary.Open(ctx, tributary.Config{
		DatabaseURL: pgtest.DatabaseURL(), Schema: db.Schema, Logger: pgtest.Logger(t),
		Runtime:   queue.RuntimeConfig{FetchPollInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		Consumers: []*events.Consumer{audit},
		Events:    tributary.EventsConfig{Forwarder: events.ForwarderConfig{PollInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	_, err = app.Emit(ctx, shipped, pingArgs{N: 1}, events.Meta{AggregateID: "a-1"})
	require.ErrorIs(t, err, events.ErrUnknownEventType, "no consumer subscribes to it yet")

	tributary.On(app, "billing", shipped, func(ctx context.Context, m events.Message[pingArgs]) error {
		billed.Add(1)
		return nil
	})
	tributary.On(app, "audit", shipped, func(ctx context.Context, m events.Message[pingArgs]) error {
		audited.Add(1)
		return nil
	})
	require.Equal(t, []string{"audit", "billing"}, func() (names []string) {
		for _, c := range app.Config().Consumers {
			names = append(names, c.Name())
		}
		return names
	}())
	require.Equal(t, events.QueueDefault, app.Config().Consumers[1].Config().Queue)
	require.PanicsWithError(t, `tributary.On: invalid consumer name "no spaces": use letters, digits and . _ : -`, func() {
		tributary.On(app, "no spaces", shipped, func(context.Context, events.Message[pingArgs]) error { return nil })
	})
	for i := range 2 {
		_, err = app.Emit(ctx, shipped, pingArgs{N: i}, events.Meta{AggregateID: "a-1"})
		require.NoError(t, err)
	}

	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	pgtest.WaitFor(t, 30*time.Second, "both consumers handle both events", func() (bool, error) {
		return billed.Load() == 2 && audited.Load() == 2, nil
	})
	require.PanicsWithError(t, "tributary.On: consumer late: cannot add a consumer after the dispatcher started", func() {
		tributary.On(app, "late", shipped, func(context.Context, events.Message[pingArgs]) error { return nil })
	})
	require.PanicsWithError(t, "tributary.On: consumer audit: cannot subscribe after the dispatcher started", func() {
		tributary.On(app, "audit", pinged, func(context.Context, events.Message[pingArgs]) error { return nil })
	})

	jobsOnly, err := tributary.New(db.Pool, tributary.Config{Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 1}})
	require.NoError(t, err)
	require.PanicsWithError(t, `tributary.On: invalid Queues "default=1": consumer billing dispatches on queue "events", which this process does not work: add it`, func() {
		tributary.On(jobsOnly, "billing", shipped, func(context.Context, events.Message[pingArgs]) error { return nil })
	})
}
