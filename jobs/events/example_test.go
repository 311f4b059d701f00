package events_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// OrderPlacedV1 is an event's payload. Validate runs at emit time and again
// before a handler runs.
type OrderPlacedV1 struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func (p OrderPlacedV1) Validate() error {
	if p.OrderID == "" {
		return errors.New("order_id is required")
	}
	return nil
}

// Event definitions live at package level of the code that owns them and
// are shared by producers and consumers.
var (
	OrderPlaced    = events.Define[OrderPlacedV1]("order.placed", nil)
	OrderCancelled = events.Define[struct{}]("order.cancelled", &events.EventOpts{Version: 2})
)

// A registry holds the event types an emitter accepts; consumers subscribe
// by exact name, by "prefix.*" or by "*".
func ExampleDefine() {
	reg, err := events.NewRegistry(OrderPlaced, OrderCancelled)
	if err != nil {
		panic(err)
	}
	fmt.Println(reg.Names())
	fmt.Println(OrderCancelled.Name(), OrderCancelled.Version())
	fmt.Println(events.ValidateEventName("order placed"))
	// Output:
	// [order.cancelled order.placed]
	// order.cancelled 2
	// invalid event type "order placed": use letters, digits and . _ : - (at most 200 characters)
}

// A producer emits in the transaction that changes its data: the outbox row
// commits with the order or not at all, and the forwarders send it on.
// Events with one AggregateID reach each consumer in emit order.
func Example_producer() {
	reg, _ := events.NewRegistry(OrderPlaced)
	em, err := events.NewEmitter(events.EmitterConfig{Registry: reg, SourceService: "orders"})
	if err != nil {
		panic(err)
	}
	placeOrder := func(ctx context.Context, pool *pgxpool.Pool, orderID string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, orderID); err != nil {
				return err
			}
			_, err := em.EmitTx(ctx, tx, OrderPlaced, OrderPlacedV1{OrderID: orderID, Cents: 1250}, events.Meta{AggregateID: orderID})
			return err
		})
	}
	_ = placeOrder // needs a database, so it is compiled, not run
}

// A worker process runs consumers: each gets its own copy of every event it
// subscribes to, as a River job, retried on failure.
func Example_consumer() {
	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	if err != nil {
		panic(err)
	}
	events.On(billing, OrderPlaced, func(ctx context.Context, m events.Message[OrderPlacedV1]) error {
		events.Logger(ctx).InfoContext(ctx, "charging", "order", m.Payload.OrderID, "cents", m.Payload.Cents)
		return nil // an error retries on the consumer's delays
	})
	install := func(rt *queue.Runtime) error {
		// The forwarder, the in-database bus and a dispatcher for billing,
		// whose dispatch jobs go to the "events" queue: rt must work it.
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{billing}})
		return err
	}
	_ = install // runs in a worker's runtime, so it is compiled, not run
}
