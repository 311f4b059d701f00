// Package inbox is durable intake of external messages in batches, handled
// one message at a time by a user's handler, with per-message retries.
//
// An adapter (amqpinbox, for the inbound AMQP bridge) writes each batch of
// messages it takes in as one row of tributary_inbox_batch, in a compact
// binary encoding, and one River job of kind tributary.inbox.batch that
// names the row, in one statement of its transaction. The batch job runs
// the inbox's HandleFunc for each message in order; a message whose handler
// fails leaves the batch as a River job of its own (tributary.inbox.message)
// that has made its attempt and is retried, listed and replayed like any
// job, while its siblings are not run again.
//
//	orders, err := inbox.New(inbox.Config{Name: "orders", Queue: "inbox", HandleFunc: handleOrder})
//	if err != nil { ... }
//	if err := inbox.Install(rt, orders); err != nil { ... }
//	in, err := amqpbridge.NewInbound(bridgeCfg, amqpbridge.InboundConfig{
//		Queue: "orders", DB: rt.Pool(),
//		InsertStatements: amqpinbox.Statements(orders, rt.Schema()), // one round trip a batch
//	})
//
// Delivery is at-least-once: a crash while a batch runs runs its unfinished
// part again, so handlers should use Message.ID as their idempotency key.
// docs/ARCHITECTURE.md, "Inbox", has the flow, the failure semantics and the
// limits.
package inbox
