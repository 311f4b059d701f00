package amqpinbox_test

import (
	"context"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/inbox/amqpinbox"
	"github.com/tributary-run/tributary/queue"
)

// A queue's messages taken in by the inbound bridge as inbox batches: the
// bridge acks each batch once its row and job committed, and the workers
// run the handler for each message.
func ExampleInserter() {
	install := func(rt *queue.Runtime, bridgeCfg amqpbridge.Config) error {
		orders, err := inbox.New(inbox.Config{
			Name:  "orders",
			Queue: "inbox", // a River queue of its own: every process that works it must install the inbox
			HandleFunc: func(ctx context.Context, m *inbox.Message) error {
				return nil // m.Body, m.Headers, m.ID (the idempotency key), ...
			},
		})
		if err != nil {
			return err
		}
		if err := inbox.Install(rt, orders); err != nil {
			return err
		}
		in, err := amqpbridge.NewInbound(bridgeCfg, amqpbridge.InboundConfig{
			Queue: "orders",
			DB:    rt.Pool(),
			// One round trip to Postgres a batch; amqpinbox.Inserter (in
			// InboundConfig.Insert) writes in the bridge's transaction, for
			// an insert that writes something else with it.
			InsertStatements: amqpinbox.Statements(orders, rt.Schema()),
		})
		if err != nil {
			return err
		}
		return rt.AddService(in)
	}
	_ = install // needs a broker and a database, so it is compiled, not run
}
