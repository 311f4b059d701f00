package tributary_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

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

func (ReceiptArgs) Kind() string { return "example.receipt" }

type PackArgs struct {
	OrderID string `json:"order_id"`
}

func (PackArgs) Kind() string { return "example.pack" }

type OrderPlacedV1 struct {
	OrderID string `json:"order_id"`
}

var OrderPlaced = events.Define[OrderPlacedV1]("example.order_placed", nil)

// One App works a job kind, an ordered consumer and a two-task workflow;
// one transaction enqueues the job, emits the event and starts the
// workflow with the application's own writes. The example runs on a fresh
// schema of the test database (TEST_DATABASE_URL, else DATABASE_URL),
// dropped at the end, and stops the App once every piece of work ran.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	var mu sync.Mutex
	var done []string
	var wg sync.WaitGroup
	wg.Add(4)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, s)
		wg.Done()
	}

	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	if err != nil {
		panic(err)
	}
	events.On(billing, OrderPlaced, func(ctx context.Context, m events.Message[OrderPlacedV1]) error {
		note("billed " + m.Payload.OrderID)
		return nil
	})
	app, err := tributary.New(pool, tributary.Config{
		Schema:    schema,
		Consumers: []*events.Consumer{billing}, // Emit takes the event types they handle
	})
	if err != nil {
		panic(err)
	}
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[ReceiptArgs]) error {
		note("receipt for " + job.Args.OrderID)
		return nil
	}))
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[PackArgs]) error {
		if t, ok := workflow.Current(ctx); ok {
			note(t.Task + " " + job.Args.OrderID)
		}
		return nil
	}))
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = app.Stop(context.Background()) }()

	wf := workflow.New("fulfil", &workflow.Opts{ID: "fulfil-o-1"})
	wf.Add("pick", PackArgs{OrderID: "o-1"}, nil)
	wf.Add("pack", PackArgs{OrderID: "o-1"}, &workflow.TaskOpts{Deps: []string{"pick"}})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the application's own writes, then, committed with them:
		if _, err := app.EnqueueTx(ctx, tx, ReceiptArgs{OrderID: "o-1"}, nil); err != nil {
			return err
		}
		if _, err := app.EmitTx(ctx, tx, OrderPlaced, OrderPlacedV1{OrderID: "o-1"}, events.Meta{AggregateID: "o-1"}); err != nil {
			return err
		}
		_, err := app.Workflows().InsertTx(ctx, tx, wf)
		return err
	})
	if err != nil {
		panic(err)
	}
	wg.Wait()
	mu.Lock()
	slices.Sort(done) // the job, the consumer and the workflow run concurrently
	fmt.Println(strings.Join(done, "\n"))
	mu.Unlock()
	// Output:
	// billed o-1
	// pack o-1
	// pick o-1
	// receipt for o-1
}

// ConfigFromLookup reads the environment table through a lookup function
// (ConfigFromEnv reads the process's environment); a bad value is an error
// naming the variable and the value.
func ExampleConfigFromLookup() {
	env := map[string]string{"TRIBUTARY_SCHEMA": "shop", "TRIBUTARY_SHUTDOWN_TIMEOUT": "45s"}
	cfg, err := tributary.ConfigFromLookup(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Schema, cfg.Runtime.ShutdownTimeout)

	env["TRIBUTARY_SHUTDOWN_TIMEOUT"] = "soon"
	_, err = tributary.ConfigFromLookup(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	fmt.Println(err)
	// Output:
	// shop 45s
	// invalid TRIBUTARY_SHUTDOWN_TIMEOUT "soon": want a positive duration such as 90s, 36h or 7d
}

// New validates the whole Config once, before anything starts; an error
// names the field and the value.
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:5432/app") // connects lazily
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, err = tributary.New(pool, tributary.Config{Queues: map[string]int{"default": 0}})
	fmt.Println(err)
	// Output: invalid Queues "default=0": want 1 to 10000 workers
}

// exampleSchema creates a schema on the test database with every
// migration applied and returns a func that drops it.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), queue.DatabaseURLDefault)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	schema := "example_" + strings.ToLower(rand.Text()[:10])
	app, err := tributary.New(pool, tributary.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := app.Migrate(ctx); err != nil {
		panic(fmt.Sprintf("this example needs PostgreSQL (set TEST_DATABASE_URL or DATABASE_URL): %v", err))
	}
	return pool, schema, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
