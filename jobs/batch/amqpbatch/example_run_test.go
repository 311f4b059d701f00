package amqpbatch_test

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/batch/amqpbatch"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// objectSink is a batch.Sink of the example's own: it hands each object's
// JSON lines over instead of storing them.
type objectSink struct {
	objects chan<- string
}

func (s objectSink) Write(ctx context.Context, key string, r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	lines, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	s.objects <- string(bytes.TrimSpace(lines))
	return nil
}

func (objectSink) Close() error { return nil }

// Messages consumed from RabbitMQ in batches are staged in one transaction
// each (the consumer acks a batch after that commit), and the stream's
// flush writes them out as one object once it holds two items. The example
// runs on the tests' RabbitMQ (AMQP_URL, else the local default) under a
// queue prefix of its own, and on a fresh schema of the test database
// (TEST_DATABASE_URL, else DATABASE_URL); both are removed at the end.
func Example_stageFromRabbitMQ() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()
	bridgeCfg := amqpbridge.Config{
		URL:         cmp.Or(os.Getenv("AMQP_URL"), amqpbridge.URLDefault),
		QueuePrefix: "example-" + strings.ToLower(rand.Text()[:10]),
	}
	defer deleteQueues(bridgeCfg.URL, bridgeCfg.Topology("access-logs"))

	streams := batch.Config{Streams: map[string]batch.StreamConfig{"access_logs": {MaxEvents: 2}}}
	objects := make(chan string, 1)
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := batch.Register(rt, batch.FlusherConfig{Sink: objectSink{objects: objects}, Streams: streams}, batch.AgeTimerConfig{}); err != nil {
		panic(err)
	}
	stager, err := batch.NewStager(rt.Client, streams)
	if err != nil {
		panic(err)
	}
	consumer, err := amqpbridge.NewBatchConsumer(bridgeCfg, amqpbridge.BatchConsumerConfig{
		Queue:         "access-logs",
		HandOff:       amqpbatch.StageHandOff(stager, "access_logs"),
		FlushWhenIdle: true, // hand a batch off as soon as the queue is empty
	})
	if err != nil {
		panic(err)
	}
	if err := rt.AddService(consumer); err != nil { // after the flush worker, so it stops first
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
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
	for _, path := range []string{"/", "/pricing"} {
		err := pub.Publish(ctx, "", bridgeCfg.QueueName("access-logs"), amqp.Publishing{
			ContentType: "application/json", Body: fmt.Appendf(nil, `{"path":%q}`, path),
		})
		if err != nil {
			panic(err)
		}
	}
	fmt.Println(<-objects)
	// Output:
	// {"path":"/"}
	// {"path":"/pricing"}
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
