package queue_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// InvoiceArgs are the arguments of the job this example enqueues.
type InvoiceArgs struct {
	OrderID string `json:"order_id"`
}

func (InvoiceArgs) Kind() string { return "example.invoice" }

// A job enqueued in a transaction and worked by a runtime in the same
// process, on a fresh schema of the test database (TEST_DATABASE_URL, else
// DATABASE_URL), dropped at the end.
func Example_enqueueAndWork() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	worked := make(chan string, 1)
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema, Queues: map[string]int{river.QueueDefault: 2}})
	if err != nil {
		panic(err)
	}
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[InvoiceArgs]) error {
		worked <- job.Args.OrderID
		return nil
	}))
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	// The job commits with the caller's transaction, or does not exist.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := rt.EnqueueTx(ctx, tx, InvoiceArgs{OrderID: "o-1"}, nil)
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("invoiced", <-worked)
	// Output: invoiced o-1
}

// exampleSchema migrates a new schema on the test database and returns a
// func that drops it.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	schema := "example_" + strings.ToLower(rand.Text()[:10])
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := m.Up(ctx); err != nil {
		panic(fmt.Sprintf("this example needs PostgreSQL (set TEST_DATABASE_URL or DATABASE_URL): %v", err))
	}
	return pool, schema, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
