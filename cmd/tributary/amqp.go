package main

import (
	"context"
	"os"
	"strings"

	"github.com/tributary-run/tributary/amqpbridge"
)

// outboxExchangeEnv names the AMQP exchange the worker's outbox forwarder
// publishes every event to, beside the in-database bus (the outbound
// bridge). Unset: events stay in the database.
const outboxExchangeEnv = "TRIBUTARY_OUTBOX_EXCHANGE"

// installAMQP wires the AMQP bridge into the worker when AMQP_URL is set: a
// publisher (lazy: it connects on the first publish), its counters on
// /metrics and, with TRIBUTARY_OUTBOX_EXCHANGE, the outbound bridge as an
// outbox publisher. It runs before the events installer so the publisher
// starts before the forwarder that uses it and stops after it.
func installAMQP(ctx context.Context, env *workerEnv) error {
	cfg := env.app.cfg
	exchange := strings.TrimSpace(os.Getenv(outboxExchangeEnv))
	if cfg.AMQPURL == "" {
		if exchange != "" {
			return usagef("%s=%q needs AMQP_URL", outboxExchangeEnv, exchange)
		}
		return nil
	}
	if strings.ContainsAny(exchange, " \t/") {
		return usagef("invalid %s %q: no spaces or slashes", outboxExchangeEnv, exchange)
	}
	bcfg := amqpbridge.ConfigFromQueue(cfg, env.app.logger)
	pub, err := amqpbridge.NewPublisher(bcfg)
	if err != nil {
		return usagef("%v", err)
	}
	if err := env.runtime.AddService(pub); err != nil {
		return err
	}
	collector := amqpbridge.NewCollector()
	collector.AddPublisher(pub)
	env.collectors = append(env.collectors, collector)
	if exchange == "" {
		return nil
	}
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: exchange})
	if err != nil {
		return err
	}
	env.outboxPublishers = append(env.outboxPublishers, out)
	return nil
}
