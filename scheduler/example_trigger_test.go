package scheduler_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// A schedule runs in the worker process as a service of its runtime;
// Trigger inserts its job now, as `tributary schedules trigger` does,
// without moving its next fire time. The example runs on a fresh schema of
// the test database (TEST_DATABASE_URL, else DATABASE_URL), dropped at the
// end.
func ExampleTrigger() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	built := make(chan string, 1)
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[ReportArgs]) error {
		_, name, _ := scheduler.FireTime(job.JobRow)
		built <- fmt.Sprintf("built the %s report (schedule %s)", job.Args.Period, name)
		return nil
	}))
	s := scheduler.New(rt.Client, scheduler.Config{})
	if err := s.Add(scheduler.Schedule{Name: "nightly-report", Spec: "30 2 * * *", Args: ReportArgs{Period: "day"}}); err != nil {
		panic(err)
	}
	if err := rt.AddService(s); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	// The scheduler stores its schedules as it starts running: trigger
	// once it has.
	for {
		_, err := scheduler.Trigger(ctx, rt.Client, "nightly-report", scheduler.TriggerOpts{})
		if err == nil {
			break
		}
		if !errors.Is(err, scheduler.ErrNotFound) || ctx.Err() != nil {
			panic(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(<-built)
	// Output: built the day report (schedule nightly-report)
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
