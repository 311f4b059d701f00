package amqpbridge_test

import (
	"context"
	"errors"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/queue"
)

type shipment struct {
	OrderID string `json:"order_id"`
}

var errCarrierDown = errors.New("carrier API unavailable")

// Example_consumer wires a publisher and an auto-ACK consumer into a worker
// runtime: the publisher first (so it is stopped last), the consumer after
// what its handler needs.
func Example_consumer() {
	// setup is what a service's main calls with its runtime and config
	// before rt.Run.
	setup := func(ctx context.Context, rt *queue.Runtime, logger *slog.Logger) error {
		bridgeCfg := amqpbridge.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Logger: logger}
		pub, err := amqpbridge.NewPublisher(bridgeCfg)
		if err != nil {
			return err
		}
		ship, err := amqpbridge.NewConsumer(bridgeCfg, amqpbridge.ConsumerConfig{
			Queue:       "shipments",
			Prefetch:    20,
			Concurrency: 4,
			Handler: amqpbridge.JSONHandler(func(ctx context.Context, s shipment, d *amqpbridge.Delivery) error {
				if s.OrderID == "" {
					return amqpbridge.Permanent(errors.New("shipment without order id")) // straight to .failed
				}
				if d.RetryCount < 2 {
					return errCarrierDown // retried after 4 s, 8 s, ... (x-retry-count)
				}
				return nil // acked
			}),
		})
		if err != nil {
			return err
		}
		if err := rt.AddService(pub); err != nil {
			return err
		}
		if err := rt.AddService(ship); err != nil {
			return err
		}
		// App code publishes with confirms; nil means the broker has it.
		return pub.Publish(ctx, "", bridgeCfg.QueueName("shipments"), amqp.Publishing{
			ContentType: "application/json", Body: []byte(`{"order_id":"o-42"}`),
		})
	}
	_ = setup // needs a broker and a database, so this example is compiled, not run
}
