package workflow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type approvalGivenV1 struct {
	OrderID string `json:"order_id"`
	By      string `json:"by"`
}

var approvalGiven = events.Define[approvalGivenV1]("approval.given", nil)

// TestSignalFromEvent emits an outbox event in the transaction of an
// app's change; a consumer turns it into the signal a waiting task
// resumes on. The signal's idempotency key is the consumer's and the
// event's, so a redelivery of the event signals once (the key's effect is
// TestSignalIdempotent's).
func TestSignalFromEvent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(createEffectSQL))
	require.NoError(t, err)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	var wfc *workflow.Client
	consumer, err := events.NewConsumer(events.ConsumerConfig{Name: "approvals"})
	require.NoError(t, err)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		wfc = workflow.NewClient(rt.Client)
		events.On(consumer, approvalGiven, workflow.SignalFromEvent(wfc, "approve",
			func(m events.Message[approvalGivenV1]) (string, any) { return "order-" + m.Payload.OrderID, m.Payload }))
		queue.AddWorker(rt, &durableWorker{pool: db.Pool, schema: db.Schema})
		require.NoError(t, coord.Register(rt))
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{consumer}})
		require.NoError(t, err)
	})
	_ = rt
	wf := workflow.New("order", &workflow.Opts{ID: "order-5"})
	wf.Add("w", durableArgs{Name: "w", NoTxStep: true, Signal: "approve"}, nil)
	wf.Add("w2", durableArgs{Name: "w2", NoTxStep: true, Signal: "approve", TimeoutMS: 1000}, &workflow.TaskOpts{Deps: []string{"w"}})
	res, err := wfc.Insert(ctx, wf)
	require.NoError(t, err)

	reg, err := events.NewRegistry(approvalGiven)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Registry: reg, SourceService: "test", Schema: db.Schema})
	require.NoError(t, err)
	var eventID string
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		eventID, err = em.EmitTx(ctx, tx, approvalGiven, approvalGivenV1{OrderID: "5", By: "ana"}, events.Meta{AggregateID: "5"})
		return err
	}))
	d := (&durableBundle{client: wfc}).waitStatus(t, res.ID, workflow.StatusCompleted)
	var got approvalGivenV1
	require.NoError(t, json.Unmarshal(durableOutputOf(t, taskByName(t, d, "w")).Signal, &got))
	require.Equal(t, approvalGivenV1{OrderID: "5", By: "ana"}, got)
	// The second waiter got nothing: one event, one signal.
	require.True(t, durableOutputOf(t, taskByName(t, d, "w2")).TimedOut)
	var key string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT idempotency_key FROM /*schema*/tributary_workflow_signal`)).Scan(&key))
	require.Equal(t, "event:approvals:"+eventID, key)
}
