package shop_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/tributarytest"

	"example.com/shop"
)

type ledger struct {
	mu   sync.Mutex
	seen []string
}

func (l *ledger) Note(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, what)
}

func (l *ledger) notes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

func setup(t *testing.T) (*tributarytest.DB, *tributary.App, *ledger) {
	t.Helper()
	db := tributarytest.NewDB(t, nil)
	l := &ledger{}
	app, err := shop.NewApp(db.Pool, tributary.Config{Schema: db.Schema, Logger: tributarytest.Logger(t)}, l)
	require.NoError(t, err)
	return db, app, l
}

func TestPlaceOrderEnqueuesEmitsAndStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, app, _ := setup(t)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, shop.PlaceOrder(ctx, app, tx, "o-1", 1250))

	job := tributarytest.RequireEnqueuedTx[shop.ReceiptArgs](ctx, t, tx, &tributarytest.RequireEnqueuedOpts{State: rivertype.JobStateAvailable})
	require.Equal(t, "o-1", job.Args.OrderID)
	ev := tributarytest.RequireEmittedTx(ctx, t, tx, shop.OrderPlaced.Name(), &tributarytest.RequireEmittedOpts{AggregateID: "o-1"})
	require.JSONEq(t, `{"order_id":"o-1","cents":1250}`, string(ev.Payload))
	wf := tributarytest.RequireWorkflowStartedTx(ctx, t, tx, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Key: "fulfil-o-1"})
	require.Equal(t, []string{"pack", "ship"}, wf.Tasks)
}

func TestPlaceOrderRunsToCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, app, l := setup(t)

	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return shop.PlaceOrder(ctx, app, tx, "o-2", 990)
	}))
	tributarytest.WorkUntilIdle(ctx, t, db, app, nil)

	require.ElementsMatch(t, []string{"receipt o-2", "billed o-2 990", "packed o-2", "shipped parcel-o-2"}, l.notes())
	wf := tributarytest.RequireWorkflowStarted(ctx, t, db.Pool, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Key: "fulfil-o-2"})
	require.Equal(t, workflow.StatusCompleted, wf.Status)
	tributarytest.RequireEnqueued[shop.ReceiptArgs](ctx, t, db.Pool, &tributarytest.RequireEnqueuedOpts{State: rivertype.JobStateCompleted})
}
