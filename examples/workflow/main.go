// Command workflow is the complete program docs/workflows.md describes,
// kept here so `go vet ./...` proves it compiles. It expects an "orders" table in your
// database.
package main

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/workflow"
)

// Each task is an ordinary River job: args and a worker.
type ChargeArgs struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

func (ChargeArgs) Kind() string { return "orders.charge" }

type ShipArgs struct {
	OrderID string `json:"order_id"`
}

func (ShipArgs) Kind() string { return "orders.ship" }

type RefundArgs struct {
	OrderID string `json:"order_id"`
}

func (RefundArgs) Kind() string { return "orders.refund" }

// Charge is what the charge task outputs for the tasks after it.
type Charge struct {
	PaymentID string `json:"payment_id"`
}

type ChargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
}

func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	paymentID := "pay-" + job.Args.OrderID // call the payment provider here
	return workflow.SetOutput(ctx, Charge{PaymentID: paymentID})
}

type ShipWorker struct {
	river.WorkerDefaults[ShipArgs]
}

func (w *ShipWorker) Work(ctx context.Context, job *river.Job[ShipArgs]) error {
	charge, err := workflow.Output[Charge](ctx, "charge") // the dependency's output, typed
	if err != nil {
		return err
	}
	if charge.PaymentID == "" {
		return river.JobCancel(errors.New("no payment: not shipping")) // fails the task for good
	}
	return workflow.SetOutput(ctx, map[string]string{"tracking": "trk-" + job.Args.OrderID})
}

type RefundWorker struct {
	river.WorkerDefaults[RefundArgs]
}

func (w *RefundWorker) Work(ctx context.Context, job *river.Job[RefundArgs]) error {
	charge, err := workflow.Output[Charge](ctx, "charge")
	if err != nil {
		return err
	}
	log.Printf("refunding %s for order %s", charge.PaymentID, job.Args.OrderID)
	return nil
}

func main() {
	ctx := context.Background()
	cfg, err := tributary.ConfigFromEnv() // DATABASE_URL, TRIBUTARY_SCHEMA, ...
	if err != nil {
		log.Fatal(err)
	}
	pool, err := tributary.NewPool(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Every App runs the workflow coordinator: its middleware runs workflow
	// tasks and releases each task in the transaction that completes its
	// last dependency.
	app, err := tributary.New(pool, cfg)
	if err != nil {
		log.Fatal(err)
	}
	tributary.AddWorker(app, &ChargeWorker{})
	tributary.AddWorker(app, &ShipWorker{})
	tributary.AddWorker(app, &RefundWorker{})
	if _, err := app.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// App code: the order row and its workflow commit together. The key
	// makes the start idempotent: a second attempt returns the same
	// workflow.
	wf := workflow.New("order", &workflow.Opts{ID: "order-42", OnConflict: workflow.ConflictReturnExisting})
	wf.Add("charge", ChargeArgs{OrderID: "42", Cents: 1999}, nil)
	wf.Add("ship", ShipArgs{OrderID: "42"}, &workflow.TaskOpts{
		Deps:       []string{"charge"},
		InsertOpts: &river.InsertOpts{MaxAttempts: 5},
	})
	// A compensation: runs only if shipping failed, and is skipped otherwise.
	wf.Add("refund", RefundArgs{OrderID: "42"}, &workflow.TaskOpts{RunIf: workflow.AnyFailed("ship")})

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1) ON CONFLICT DO NOTHING", "42"); err != nil {
			return err
		}
		res, err := app.Workflows().InsertTx(ctx, tx, wf) // rolled back: no workflow, no task, no job
		if err == nil {
			log.Printf("workflow %s (existing: %v)", res.ID, res.Existing)
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	if err := app.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
