package events_test

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

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// An event emitted in the producer's transaction reaches a consumer's
// handler in a worker process, here the same process, on a fresh schema of
// the test database (TEST_DATABASE_URL, else DATABASE_URL), dropped at the
// end.
func Example_emitAndConsume() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	handled := make(chan string, 1)
	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	if err != nil {
		panic(err)
	}
	events.On(billing, OrderPlaced, func(ctx context.Context, m events.Message[OrderPlacedV1]) error {
		handled <- fmt.Sprintf("billing charged %d cents for %s", m.Payload.Cents, m.Payload.OrderID)
		return nil
	})
	// The consumer's dispatch jobs go to its queue, "events" by default.
	queues := map[string]int{river.QueueDefault: 2, events.QueueDefault: 2}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema, Queues: queues})
	if err != nil {
		panic(err)
	}
	if _, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{billing}}); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	reg, err := events.NewRegistry(OrderPlaced)
	if err != nil {
		panic(err)
	}
	em, err := events.NewEmitter(events.EmitterConfig{Schema: schema, Registry: reg, SourceService: "orders"})
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := em.EmitTx(ctx, tx, OrderPlaced, OrderPlacedV1{OrderID: "o-7", Cents: 1250}, events.Meta{AggregateID: "o-7"})
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-handled)
	// Output: billing charged 1250 cents for o-7
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
