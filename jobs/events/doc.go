// Package events is tributary's transactional outbox and in-database event
// bus: typed event definitions, Emit in the caller's transaction, the
// Forwarder that moves outbox rows to publishers, the Bus that fans each
// event out to every subscribed consumer as a River job, and the Dispatcher
// that runs consumers' handlers with retries and per-aggregate ordering.
//
// Example_producer emits in the caller's transaction, Example_consumer
// runs a consumer in a worker, ExampleDefine defines event types.
//
// The event API lives here rather than in package queue because it is a
// feature built on the hub (River jobs, the runtime's services). The roles
// it shares with the AMQP bridge (the event a publisher gets, the
// publishers' interfaces) are in the leaf package outbox.
package events
