package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/queue"
)

// ReceiptArgs are a job's arguments: River stores their JSON with the job.
type ReceiptArgs struct {
	OrderID string `json:"order_id"`
}

func (ReceiptArgs) Kind() string { return "orders.receipt" }

// A worker process: a runtime on the pool, its workers and services, and
// Run, which starts everything in order and stops it in reverse on SIGINT
// or SIGTERM (a second signal stops at once).
func Example_worker() {
	run := func(ctx context.Context) error {
		pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
		if err != nil {
			return err
		}
		defer pool.Close()
		rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Queues: map[string]int{river.QueueDefault: 10}})
		if err != nil {
			return err
		}
		queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[ReceiptArgs]) error {
			slog.InfoContext(ctx, "sending receipt", "order_id", job.Args.OrderID)
			return nil // an error retries with backoff
		}))
		return rt.Run(ctx)
	}
	_ = run // needs a database, so it is compiled, not run
}

// EnqueueTx inserts the job in the caller's transaction, beside the
// caller's own rows: both commit, or neither exists.
func ExampleClient_EnqueueTx() {
	placeOrder := func(ctx context.Context, pool *pgxpool.Pool, client *queue.Client, orderID string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, orderID); err != nil {
				return err
			}
			_, err := client.EnqueueTx(ctx, tx, ReceiptArgs{OrderID: orderID}, &queue.EnqueueOpts{Queue: "email"})
			return err
		})
	}
	_ = placeOrder // needs a database, so it is compiled, not run
}

// tributary's SQL names every table with a schema marker that Qualify
// replaces, so statements never depend on the caller's search_path.
func ExampleQualify() {
	fmt.Println(queue.Qualify("tenant_a", "SELECT count(*) FROM /*schema*/tributary_outbox"))
	// Output: SELECT count(*) FROM "tenant_a".tributary_outbox
}
