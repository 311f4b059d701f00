// Package amqpbridge connects tributary to RabbitMQ (AMQP 0-9-1, through
// amqp091-go) with the conventions of the Node service it replaces, so both
// can share queues:
//
//   - Publisher: one lazy, reused, self-healing connection; publisher
//     confirms (a publish counts once the broker confirmed it); every publish
//     is mandatory and an unroutable return is an error, not a success.
//   - Consumer: AutoAck mode (the bridge settles from the handler's result)
//     or ManualAck mode (Delivery.Ack/Nack, only the first call counts).
//     Failures go to retry tiers "{name}.retry.<ms>" (queues with a fixed TTL
//     that dead-letter back to the main queue) with the delay
//     min(RetryBase*2^n, RetryMax), counted in the x-retry-count header;
//     after MaxMessageRetries, or on a Permanent error or a panic, to
//     "{name}.failed" with the reason in x-failure-reason.
//   - BatchConsumer: batch ACK with prefetch = batch size, flush on count,
//     bytes or age, one multiple-ack after the hand-off succeeded.
//   - Inbound: queue messages become River jobs (or other rows), acked after
//     the insert committed. Outbound: an outbox.Publisher that publishes
//     outbox events to an exchange and succeeds only on the broker's confirm.
//   - DLQ: list and replay "{name}.failed".
//
// Queue names are "{QueuePrefix}/{name}" (just name without a prefix). The
// bridge reconnects by itself with backoff; amqp091-go's experimental
// Config.Recovery stays off because after its recovery old delivery tags
// would settle new messages. Every delivery carries the generation of its
// channel, and a settlement from an older generation is dropped
// (ErrStaleDelivery): the broker redelivers that message instead.
//
// Everything long-running implements queue.Service. Add the Publisher to the
// runtime before whatever publishes, and consumers after what their handlers
// need: the runtime starts services in order and stops them in reverse, so on
// shutdown consumers stop taking messages, finish their handlers, flush and
// ack their batches, close their channels and connections, and only then the
// publisher closes. Example_consumer shows the wiring.
package amqpbridge
