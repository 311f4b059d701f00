// Package events is tributary's transactional outbox and in-database event
// bus: typed event definitions, Emit in the caller's transaction, the
// Forwarder that moves outbox rows to publishers, the Bus that fans each
// event out to every subscribed consumer as a River job, and the Dispatcher
// that runs consumers' handlers with retries and per-aggregate ordering.
//
// App code (producer):
//
//	var OrderPlaced = events.Define[OrderPlacedV1]("order.placed", nil)
//	reg, _ := events.NewRegistry(OrderPlaced)
//	em, _ := events.NewEmitter(events.EmitterConfig{Registry: reg, SourceService: "orders"})
//	// inside the transaction that saves the order:
//	id, err := em.EmitTx(ctx, tx, OrderPlaced, OrderPlacedV1{OrderID: "o-1"}, events.Meta{AggregateID: "o-1"})
//
// Worker process (consumer):
//
//	c, _ := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
//	events.On(c, OrderPlaced, func(ctx context.Context, m events.Message[OrderPlacedV1]) error {
//		events.Logger(ctx).InfoContext(ctx, "charging", "order", m.Payload.OrderID)
//		return nil
//	})
//	_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}})
//
// The event API lives here rather than in package queue because it is a
// feature built on the hub (River jobs, the runtime's services), and queue
// imports no tributary package but migrations; queue only holds the types
// shared with the AMQP bridge (queue.OutboxEvent, queue.OutboxPublisher).
package events
