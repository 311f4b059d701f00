package workflow_test

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
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// Each task of a workflow is an ordinary River job: args and a worker.
type ReserveArgs struct {
	SKU string `json:"sku"`
}

func (ReserveArgs) Kind() string { return "example.reserve" }

type PackArgs struct {
	SKU string `json:"sku"`
}

func (PackArgs) Kind() string { return "example.pack" }

// Reservation is the reserve task's output, read by the task after it.
type Reservation struct {
	Shelf string `json:"shelf"`
}

// A two-task workflow (pack waits for reserve and reads its output) started
// in a transaction and run to completion by a worker in the same process,
// on a fresh schema of the test database (TEST_DATABASE_URL, else
// DATABASE_URL), dropped at the end.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	// Worker process: the coordinator's middleware runs the tasks and
	// releases pack in the transaction that completes reserve.
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:     schema,
		Queues:     map[string]int{river.QueueDefault: 2},
		Middleware: []rivertype.Middleware{coord.Middleware()},
	})
	if err != nil {
		panic(err)
	}
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[ReserveArgs]) error {
		return workflow.SetOutput(ctx, Reservation{Shelf: "B7"})
	}))
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[PackArgs]) error {
		r, err := workflow.Output[Reservation](ctx, "reserve") // the dependency's output, typed
		if err != nil {
			return err
		}
		return workflow.SetOutput(ctx, "packed "+job.Args.SKU+" from "+r.Shelf)
	}))
	if err := coord.Register(rt); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	// App code: the workflow, its tasks and their jobs commit with the
	// caller's transaction, or none of them exists.
	wf := workflow.New("fulfil", &workflow.Opts{ID: "fulfil-o-1"})
	wf.Add("reserve", ReserveArgs{SKU: "mug"}, nil)
	wf.Add("pack", PackArgs{SKU: "mug"}, &workflow.TaskOpts{Deps: []string{"reserve"}})
	wfc := workflow.NewClient(rt.Client)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := wfc.InsertTx(ctx, tx, wf)
		return err
	})
	if err != nil {
		panic(err)
	}

	// Get reads the record (by the key given as Opts.ID, or by the
	// generated id): wait until the workflow has finished.
	var d *workflow.Details
	for d == nil || d.Status == workflow.StatusRunning {
		select {
		case <-ctx.Done():
			panic("the workflow did not finish in time")
		case <-time.After(50 * time.Millisecond):
		}
		if d, err = wfc.Get(ctx, "fulfil-o-1"); err != nil {
			panic(err)
		}
	}
	fmt.Println(d.Name, d.Key, d.Status)
	for _, task := range d.Tasks {
		fmt.Println(task.Name, task.State, string(task.Output))
	}
	// Output:
	// fulfil fulfil-o-1 completed
	// reserve completed {"shelf": "B7"}
	// pack completed "packed mug from B7"
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
