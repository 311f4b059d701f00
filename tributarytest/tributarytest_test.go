package tributarytest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/tributarytest"
)

type receiptArgs struct {
	OrderID string `json:"order_id"`
}

func (receiptArgs) Kind() string { return "test.receipt" }

type shipArgs struct {
	OrderID string `json:"order_id"`
}

func (shipArgs) Kind() string { return "test.ship" }

type refundArgs struct{}

func (refundArgs) Kind() string { return "test.refund" }

type orderPlacedV1 struct {
	OrderID string `json:"order_id"`
}

var orderPlaced = events.Define[orderPlacedV1]("test.order_placed", nil)

// recordingTB stands in for the test in the cases where an assertion must
// fail: it records the failure instead of ending the test.
type recordingTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Errorf(format string, args ...any) { r.Fatalf(format, args...) }

func (r *recordingTB) failure(t *testing.T) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.failures, 1, "want one failure")
	return r.failures[0]
}

type testBundle struct {
	db      *tributarytest.DB
	client  *queue.Client
	emitter *events.Emitter
	wfc     *workflow.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := tributarytest.NewDB(t, nil)
	client, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: tributarytest.Logger(t)})
	require.NoError(t, err)
	reg, err := events.NewRegistry(orderPlaced)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	return &testBundle{db: db, client: client, emitter: em, wfc: workflow.NewClient(client)}
}

// placeOrder is the code under test: it enqueues, emits and starts a
// workflow in the caller's transaction.
func (b *testBundle) placeOrder(ctx context.Context, tx pgx.Tx, orderID string) error {
	if _, err := b.client.EnqueueTx(ctx, tx, receiptArgs{OrderID: orderID}, &queue.EnqueueOpts{Queue: "email"}); err != nil {
		return err
	}
	if _, err := b.emitter.EmitTx(ctx, tx, orderPlaced, orderPlacedV1{OrderID: orderID}, events.Meta{AggregateID: orderID}); err != nil {
		return err
	}
	wf := workflow.New("fulfil", &workflow.Opts{ID: "fulfil-" + orderID})
	wf.Add("ship", shipArgs{OrderID: orderID}, nil)
	_, err := b.wfc.InsertTx(ctx, tx, wf)
	return err
}

func TestNewDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tributarytest.NewDB(t, nil)
	require.True(t, strings.HasPrefix(db.Schema, "tt_"), db.Schema)

	var current string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current))
	require.Equal(t, db.Schema, current, "the pool's search_path is the test's schema")
	var outboxRows int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q("SELECT count(*) FROM /*schema*/tributary_outbox")).Scan(&outboxRows))
	require.Zero(t, outboxRows)
	_, err := db.Pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)")
	require.NoError(t, err, "a test's own tables go into its schema")
}

func TestRequireInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, b.placeOrder(ctx, tx, "o-1"))

	// The subtests share tx, which is one connection: they run in turn.
	t.Run("Found", func(t *testing.T) {
		job := tributarytest.RequireEnqueuedTx[receiptArgs](ctx, t, tx, &tributarytest.RequireEnqueuedOpts{Queue: "email", State: rivertype.JobStateAvailable})
		require.Equal(t, "o-1", job.Args.OrderID)
		ev := tributarytest.RequireEmittedTx(ctx, t, tx, orderPlaced.Name(), &tributarytest.RequireEmittedOpts{AggregateID: "o-1", Version: 1})
		require.JSONEq(t, `{"order_id":"o-1"}`, string(ev.Payload))
		wf := tributarytest.RequireWorkflowStartedTx(ctx, t, tx, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Key: "fulfil-o-1"})
		require.Equal(t, workflow.StatusRunning, wf.Status)
		require.Equal(t, []string{"ship"}, wf.Tasks)
	})

	t.Run("NotCommittedIsNotOnThePool", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		tributarytest.RequireEnqueued[receiptArgs](ctx, rec, b.db.Pool, nil)
		require.Contains(t, rec.failure(t), `no job of kind "test.receipt" in schema `+b.db.Schema+`; found instead no jobs at all`)
	})

	t.Run("KindNotEnqueuedNamesTheJobsFound", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		tributarytest.RequireEnqueuedTx[refundArgs](ctx, rec, tx, &tributarytest.RequireEnqueuedOpts{Schema: b.db.Schema})
		msg := rec.failure(t)
		require.Contains(t, msg, `no job of kind "test.refund" in schema `+b.db.Schema+`; found instead 2 job(s):`)
		require.Contains(t, msg, `kind "test.receipt" queue "email"`)
		require.Contains(t, msg, `kind "test.ship" queue "default" priority 1 max attempts 25 state available tags ["tributary_wf_`, "the workflow's task")
	})

	t.Run("WrongOptionsNameTheJobsOfTheKind", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		tributarytest.RequireEnqueuedTx[receiptArgs](ctx, rec, tx, &tributarytest.RequireEnqueuedOpts{Queue: "default"})
		msg := rec.failure(t)
		require.Contains(t, msg, `no job of kind "test.receipt" with queue "default"`)
		require.Contains(t, msg, `found instead 1 job(s):`)
		require.Contains(t, msg, `kind "test.receipt" queue "email"`)
		require.Contains(t, msg, `args {"order_id": "o-1"}`)
	})

	t.Run("EventNotEmitted", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		tributarytest.RequireEmittedTx(ctx, rec, tx, "order.cancelled", nil)
		msg := rec.failure(t)
		require.Contains(t, msg, `no event of type "order.cancelled"`)
		require.Contains(t, msg, `type "test.order_placed" version 1 aggregate id "o-1" status PENDING payload {"order_id": "o-1"}`)

		rec = &recordingTB{TB: t}
		tributarytest.RequireEmittedTx(ctx, rec, tx, orderPlaced.Name(), &tributarytest.RequireEmittedOpts{AggregateID: "o-2"})
		require.Contains(t, rec.failure(t), `no event of type "test.order_placed" with aggregate id "o-2"`)
	})

	t.Run("WorkflowNotStarted", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		tributarytest.RequireWorkflowStartedTx(ctx, rec, tx, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Key: "fulfil-o-2"})
		msg := rec.failure(t)
		require.Contains(t, msg, `no workflow named "fulfil" with key "fulfil-o-2"`)
		require.Contains(t, msg, `name "fulfil" key "fulfil-o-1" status running`)
	})
}

func TestWorkUntilIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	var mu sync.Mutex
	var handled []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, s)
	}
	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	require.NoError(t, err)
	events.On(billing, orderPlaced, func(ctx context.Context, m events.Message[orderPlacedV1]) error {
		note("billed " + m.Payload.OrderID)
		return nil
	})
	coord, err := workflow.NewCoordinator(b.db.Pool, workflow.CoordinatorConfig{Schema: b.db.Schema, Logger: tributarytest.Logger(t)})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(b.db.Pool, queue.RuntimeConfig{
		Schema: b.db.Schema, Logger: tributarytest.Logger(t),
		Queues:     map[string]int{river.QueueDefault: 4, "email": 2, events.QueueDefault: 2},
		Middleware: []rivertype.Middleware{coord.Middleware()},
	})
	require.NoError(t, err)
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[receiptArgs]) error {
		note("receipt " + job.Args.OrderID)
		return nil
	}))
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[shipArgs]) error {
		note("shipped " + job.Args.OrderID)
		return nil
	}))
	require.NoError(t, coord.Register(rt))
	_, err = events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{billing}})
	require.NoError(t, err)

	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error { return b.placeOrder(ctx, tx, "o-1") }))
	tributarytest.WorkUntilIdle(ctx, t, b.db, rt, nil)

	mu.Lock()
	require.ElementsMatch(t, []string{"receipt o-1", "billed o-1", "shipped o-1"}, handled)
	mu.Unlock()
	tributarytest.RequireEnqueued[receiptArgs](ctx, t, b.db.Pool, &tributarytest.RequireEnqueuedOpts{State: rivertype.JobStateCompleted})
	tributarytest.RequireWorkflowStarted(ctx, t, b.db.Pool, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Status: workflow.StatusCompleted})
	ev := tributarytest.RequireEmitted(ctx, t, b.db.Pool, orderPlaced.Name(), nil)
	require.Equal(t, "o-1", ev.AggregateID)
}

func TestWorkUntilIdleReportsWhatIsLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rt, err := queue.NewRuntime(b.db.Pool, queue.RuntimeConfig{Schema: b.db.Schema, Logger: tributarytest.Logger(t), ShutdownTimeout: time.Second,
		Queues: map[string]int{river.QueueDefault: 4, events.QueueDefault: 2}})
	require.NoError(t, err)
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[receiptArgs]) error {
		<-ctx.Done() // never finishes on its own
		return errors.New("stopped")
	}))
	slow, err := events.NewConsumer(events.ConsumerConfig{Name: "slow"})
	require.NoError(t, err)
	events.On(slow, orderPlaced, func(ctx context.Context, m events.Message[orderPlacedV1]) error {
		<-ctx.Done()
		return errors.New("stopped")
	})
	_, err = events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{slow}})
	require.NoError(t, err)
	_, err = b.client.Enqueue(ctx, receiptArgs{OrderID: "o-9"}, nil)
	require.NoError(t, err)
	_, err = b.emitter.Emit(ctx, b.db.Pool, orderPlaced, orderPlacedV1{OrderID: "o-9"}, events.Meta{AggregateID: "o-9"})
	require.NoError(t, err)

	rec := &recordingTB{TB: t}
	tributarytest.WorkUntilIdle(ctx, rec, b.db, rt, &tributarytest.WorkOpts{Timeout: 2 * time.Second})
	msg := rec.failure(t)
	require.Contains(t, msg, "the schema did not become idle before the deadline")
	require.Contains(t, msg, `jobs not finished: 2 job(s):`)
	require.Contains(t, msg, `kind "test.receipt" queue "default" state running attempt 1/25`)
	require.Contains(t, msg, `kind "tributary.event.dispatch" queue "events" state running`)
	require.Contains(t, msg, `events not yet handled, by consumer: slow 1`)
}

func TestWorkUntilIdleRefusesAnotherSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := tributarytest.NewDB(t, nil)
	rt, err := queue.NewRuntime(other.Pool, queue.RuntimeConfig{Schema: other.Schema, Logger: tributarytest.Logger(t)})
	require.NoError(t, err)
	rec := &recordingTB{TB: t}
	tributarytest.WorkUntilIdle(context.Background(), rec, b.db, rt, nil)
	require.Contains(t, rec.failure(t), fmt.Sprintf("the app works schema %q, the test's schema is %q", other.Schema, b.db.Schema))
}

func TestExampleSignUp(t *testing.T) {
	testSignUp(t)
}
