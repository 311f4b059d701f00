package amqpinbox_test

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
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/inbox/amqpinbox"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// A message published to RabbitMQ is taken in by the inbound bridge as an
// inbox batch (acked once its row committed) and handled by a worker. The
// example runs on the tests' RabbitMQ (AMQP_URL, else the local default)
// under a queue prefix of its own, and on a fresh schema of the test
// database (TEST_DATABASE_URL, else DATABASE_URL); both are removed at the
// end.
func Example_inbound() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()
	bridgeCfg := amqpbridge.Config{
		URL:         cmp.Or(os.Getenv("AMQP_URL"), amqpbridge.URLDefault),
		QueuePrefix: "example-" + strings.ToLower(rand.Text()[:10]),
	}
	defer deleteQueues(bridgeCfg.URL, bridgeCfg.Topology("orders"))

	handled := make(chan string, 1)
	orders, err := inbox.New(inbox.Config{
		Name: "orders",
		HandleFunc: func(ctx context.Context, m *inbox.Message) error {
			handled <- m.ID + " " + string(m.Body)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := inbox.Install(rt, orders); err != nil {
		panic(err)
	}
	in, err := amqpbridge.NewInbound(bridgeCfg, amqpbridge.InboundConfig{
		Queue:            "orders",
		DB:               pool,
		InsertStatements: amqpinbox.Statements(orders, schema),
	})
	if err != nil {
		panic(err)
	}
	if err := rt.AddService(in); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil { // the inbound bridge declares its queue
		panic(fmt.Sprintf("this example needs RabbitMQ (set AMQP_URL): %v", err))
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	pub, err := amqpbridge.NewPublisher(bridgeCfg)
	if err != nil {
		panic(err)
	}
	if err := pub.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = pub.Stop(context.Background()) }()
	err = pub.Publish(ctx, "", bridgeCfg.QueueName("orders"), amqp.Publishing{
		MessageId: "m-1", ContentType: "application/json", Body: []byte(`{"order_id":"o-5"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-handled)
	// Output: m-1 {"order_id":"o-5"}
}

// deleteQueues removes the example's queues from the broker.
func deleteQueues(url string, topo amqpbridge.Topology) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	names := []string{topo.Main, topo.Failed}
	for _, tier := range topo.Retry {
		names = append(names, tier.Queue)
	}
	for _, name := range names {
		_, _ = ch.QueueDelete(name, false, false, false)
	}
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
