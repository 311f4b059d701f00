package amqpbridge_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/amqpbridge"
)

// A message published with confirms reaches a consumer's handler; here on
// the RabbitMQ of the tests (AMQP_URL, else the local default), under a
// queue prefix of its own whose queues are deleted at the end.
func Example_publishAndConsume() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := amqpbridge.Config{
		URL:         cmp.Or(os.Getenv("AMQP_URL"), amqpbridge.URLDefault),
		QueuePrefix: "example-" + strings.ToLower(rand.Text()[:10]),
	}

	got := make(chan shipment, 1)
	consumer, err := amqpbridge.NewConsumer(cfg, amqpbridge.ConsumerConfig{
		Queue: "shipments",
		Handler: amqpbridge.JSONHandler(func(ctx context.Context, s shipment, d *amqpbridge.Delivery) error {
			got <- s
			return nil // acked
		}),
	})
	if err != nil {
		panic(err)
	}
	pub, err := amqpbridge.NewPublisher(cfg)
	if err != nil {
		panic(err)
	}
	if err := pub.Start(ctx); err != nil {
		panic(fmt.Sprintf("this example needs RabbitMQ (set AMQP_URL): %v", err))
	}
	defer func() { _ = pub.Stop(context.Background()) }()
	if err := consumer.Start(ctx); err != nil { // declares the queue, its retry tiers and .failed
		panic(err)
	}
	defer deleteQueues(cfg.URL, consumer.Topology())
	defer func() { _ = consumer.Stop(context.Background()) }()

	// nil means the broker has the message.
	err = pub.Publish(ctx, "", cfg.QueueName("shipments"), amqp.Publishing{
		ContentType: "application/json", Body: []byte(`{"order_id":"o-42"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("shipping", (<-got).OrderID)
	// Output: shipping o-42
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
