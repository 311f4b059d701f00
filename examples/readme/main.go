// Command readme is the example from README.md, kept here so `go vet ./...`
// proves it compiles. It expects an "orders" table in your database.
package main

import (
	"context"
	"log"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// SendReceiptArgs is a job: its JSON is stored with the job.
type SendReceiptArgs struct {
	OrderID string `json:"order_id"`
}

func (SendReceiptArgs) Kind() string { return "orders.send_receipt" }

type SendReceiptWorker struct {
	river.WorkerDefaults[SendReceiptArgs]
}

func (w *SendReceiptWorker) Work(ctx context.Context, job *river.Job[SendReceiptArgs]) error {
	slog.InfoContext(ctx, "sending receipt", "order_id", job.Args.OrderID, "attempt", job.Attempt)
	return nil // an error retries with backoff; a panic is recovered and counts as a failure
}

func main() {
	ctx := context.Background()
	// Your service's own settings; empty fields take tributary's defaults.
	cfg := queue.Config{DatabaseURL: os.Getenv("DATABASE_URL"), Schema: os.Getenv("TRIBUTARY_SCHEMA")}.WithDefaults()
	pool, err := queue.NewPool(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	m, err := migrations.New(pool, migrations.Config{Schema: cfg.Schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil { // idempotent; safe from many processes at once
		log.Fatal(err)
	}

	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: cfg.Schema,
		Queues: map[string]int{"default": 50},
	})
	if err != nil {
		log.Fatal(err)
	}
	queue.AddWorker(rt, &SendReceiptWorker{})

	// App code: the job exists only if the order does.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", "o-42"); err != nil {
			return err
		}
		_, err := rt.EnqueueTx(ctx, tx, SendReceiptArgs{OrderID: "o-42"}, &queue.EnqueueOpts{MaxAttempts: 5})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	// Work until SIGINT/SIGTERM; running jobs get RuntimeConfig.ShutdownTimeout
	// (30 s) to finish, the rest are cancelled and run again later.
	if err := rt.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
