package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// OrderPlaced is emitted in the transaction that writes the order.
type OrderPlaced struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// Validate runs at emit time and before every handler.
func (o OrderPlaced) Validate() error {
	if o.OrderID == "" {
		return errors.New("order_id is empty")
	}
	if o.Cents <= 0 {
		return fmt.Errorf("cents %d must be positive", o.Cents)
	}
	return nil
}

// OrderShipped is emitted in the transaction that applies the warehouse's
// "shipped" message.
type OrderShipped struct {
	OrderID  string `json:"order_id"`
	Tracking string `json:"tracking,omitempty"`
}

var (
	orderPlacedEvent  = events.Define[OrderPlaced]("order.placed", nil)
	orderShippedEvent = events.Define[OrderShipped]("order.shipped", nil)
)

// sourceService names this service in every event it emits.
const sourceService = "orders"

// newConsumers returns the billing and shipping consumers. Both keep the
// default ordering (OrderingBlock) and dispatch on the "events" queue, with
// slots of their own (tributary.Config.Queues): the events of one order (the aggregate)
// reach each of them one at a time, in emit order, so neither sees
// order.shipped before order.placed, however many workers run. Each records
// what it handled in order_consumer_log, keyed by the event id so a
// redelivery records nothing twice.
func newConsumers(st store, db queue.DBTX) ([]*events.Consumer, error) {
	var out []*events.Consumer
	for _, name := range []string{"billing", "shipping"} {
		c, err := events.NewConsumer(events.ConsumerConfig{Name: name, Ordering: events.OrderingBlock})
		if err != nil {
			return nil, err
		}
		record := func(ctx context.Context, id, typ, orderID string) error {
			_, err := db.Exec(ctx, st.q(logConsumedSQL), name, id, typ, orderID)
			return err
		}
		events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[OrderPlaced]) error {
			events.Logger(ctx).InfoContext(ctx, name+" saw a placed order", "order_id", m.Payload.OrderID, "cents", m.Payload.Cents)
			return record(ctx, m.ID, m.Type, m.Payload.OrderID)
		})
		events.On(c, orderShippedEvent, func(ctx context.Context, m events.Message[OrderShipped]) error {
			events.Logger(ctx).InfoContext(ctx, name+" saw a shipped order", "order_id", m.Payload.OrderID)
			return record(ctx, m.ID, m.Type, m.Payload.OrderID)
		})
		out = append(out, c)
	}
	return out, nil
}
