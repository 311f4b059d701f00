// Package shop is a user's program built on tributary, kept outside the
// tributary module: tributarytest's TestFromAnotherModule copies it into a
// temporary module of its own and runs its tests there.
package shop

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type ReceiptArgs struct {
	OrderID string `json:"order_id"`
}

func (ReceiptArgs) Kind() string { return "shop.receipt" }

type PackArgs struct {
	OrderID string `json:"order_id"`
}

func (PackArgs) Kind() string { return "shop.pack" }

type ShipArgs struct {
	OrderID string `json:"order_id"`
}

func (ShipArgs) Kind() string { return "shop.ship" }

type OrderPlacedV1 struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

var OrderPlaced = events.Define[OrderPlacedV1]("shop.order_placed", nil)

// Ledger records what the workers and the consumer did, for the tests.
type Ledger interface {
	Note(what string)
}

// NewApp is the shop's composition root: one job kind, an ordered
// consumer and a two-task workflow.
func NewApp(pool *pgxpool.Pool, cfg tributary.Config, ledger Ledger) (*tributary.App, error) {
	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	if err != nil {
		return nil, err
	}
	events.On(billing, OrderPlaced, func(ctx context.Context, m events.Message[OrderPlacedV1]) error {
		ledger.Note(fmt.Sprintf("billed %s %d", m.Payload.OrderID, m.Payload.Cents))
		return nil
	})
	cfg.Consumers = append(cfg.Consumers, billing)
	cfg.Events.Types = append(cfg.Events.Types, OrderPlaced)
	app, err := tributary.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[ReceiptArgs]) error {
		ledger.Note("receipt " + job.Args.OrderID)
		return nil
	}))
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[PackArgs]) error {
		ledger.Note("packed " + job.Args.OrderID)
		return workflow.SetOutput(ctx, "parcel-"+job.Args.OrderID)
	}))
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[ShipArgs]) error {
		parcel, err := workflow.Output[string](ctx, "pack")
		if err != nil {
			return err
		}
		ledger.Note("shipped " + parcel)
		return nil
	}))
	return app, nil
}

// PlaceOrder is the code under test: in the caller's transaction it
// enqueues the receipt, emits OrderPlaced and starts the fulfilment
// workflow.
func PlaceOrder(ctx context.Context, app *tributary.App, tx pgx.Tx, orderID string, cents int64) error {
	if _, err := app.EnqueueTx(ctx, tx, ReceiptArgs{OrderID: orderID}, &queue.EnqueueOpts{Queue: "default"}); err != nil {
		return err
	}
	if _, err := app.EmitTx(ctx, tx, OrderPlaced, OrderPlacedV1{OrderID: orderID, Cents: cents}, events.Meta{AggregateID: orderID}); err != nil {
		return err
	}
	wf := workflow.New("fulfil", &workflow.Opts{ID: "fulfil-" + orderID})
	wf.Add("pack", PackArgs{OrderID: orderID}, nil)
	wf.Add("ship", ShipArgs{OrderID: orderID}, &workflow.TaskOpts{Deps: []string{"pack"}})
	_, err := app.Workflows().InsertTx(ctx, tx, wf)
	return err
}
