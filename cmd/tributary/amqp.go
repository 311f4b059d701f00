package main

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/batch/amqpbatch"
)

// outboxExchangeEnv names the AMQP exchange the worker's outbox forwarder
// publishes every event to, beside the in-database bus (the outbound
// bridge). Unset: events stay in the database.
const outboxExchangeEnv = "TRIBUTARY_OUTBOX_EXCHANGE"

// batchQueueEnv names an AMQP queue the worker consumes into batch staging,
// as QUEUE or QUEUE:STREAM; the stream defaults to the queue name. Unset:
// no queue is consumed.
const batchQueueEnv = "TRIBUTARY_AMQP_BATCH_QUEUE"

// installAMQP wires the AMQP bridge into the worker when AMQP_URL is set: a
// publisher (lazy: it connects on the first publish), its counters on
// /metrics, with TRIBUTARY_OUTBOX_EXCHANGE the outbound bridge as an outbox
// publisher, and with TRIBUTARY_AMQP_BATCH_QUEUE a batch-ACK consumer that
// stages the queue's messages for the batch flushes. It runs after the batch
// installer, so the consumer starts after the flush machinery and stops
// before it, and before the events installer, so the publisher starts
// before the forwarder that uses it and stops after it.
func installAMQP(ctx context.Context, env *workerEnv) error {
	cfg := env.app.cfg
	exchange := strings.TrimSpace(os.Getenv(outboxExchangeEnv))
	batchQueueVal := strings.TrimSpace(os.Getenv(batchQueueEnv))
	if cfg.AMQPURL == "" {
		if exchange != "" {
			return usagef("%s=%q needs AMQP_URL", outboxExchangeEnv, exchange)
		}
		if batchQueueVal != "" {
			return usagef("%s=%q needs AMQP_URL", batchQueueEnv, batchQueueVal)
		}
		return nil
	}
	if strings.ContainsAny(exchange, " \t/") {
		return usagef("invalid %s %q: no spaces or slashes", outboxExchangeEnv, exchange)
	}
	var bq batchQueue
	if batchQueueVal != "" {
		var err error
		if bq, err = parseBatchQueue(batchQueueVal); err != nil {
			return err
		}
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
	if batchQueueVal != "" {
		// Added after the publisher, so the runtime stops it first: stop
		// consuming, stage and ack the buffer, close its channel and
		// connection, and only then the publisher and the flush machinery.
		if err := addBatchConsumer(env, bcfg, bq, collector); err != nil {
			return err
		}
	}
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

// batchQueue is a parsed TRIBUTARY_AMQP_BATCH_QUEUE.
type batchQueue struct {
	queue  string // logical queue name; QUEUE_PREFIX is added by the bridge
	stream string // batch stream its messages are staged into
}

// batchQueueNameRE allows what a stream name allows, so the queue name can
// be the default stream name.
var batchQueueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// parseBatchQueue parses QUEUE or QUEUE:STREAM.
func parseBatchQueue(raw string) (batchQueue, error) {
	name, stream, hasStream := strings.Cut(raw, ":")
	if !hasStream {
		stream = name
	}
	if !batchQueueNameRE.MatchString(name) || batch.ValidateStream(stream) != nil {
		return batchQueue{}, usagef("invalid %s %q: want QUEUE or QUEUE:STREAM, each of letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters", batchQueueEnv, raw)
	}
	return batchQueue{queue: name, stream: stream}, nil
}

// addBatchConsumer runs a batch-ACK consumer on bq.queue whose hand-off
// stages each batch into bq.stream in one transaction; the batch is acked
// after the commit and written out by the flush worker like any staged
// items. Batch size and age are the S3_BATCH_* settings.
func addBatchConsumer(env *workerEnv, bcfg amqpbridge.Config, bq batchQueue, collector *amqpbridge.Collector) error {
	if env.batchStager == nil {
		return errors.New("the batch flushes must be installed before the AMQP batch consumer")
	}
	c, err := amqpbridge.NewBatchConsumer(bcfg, amqpbridge.BatchConsumerConfig{
		Queue:   bq.queue,
		HandOff: amqpbatch.StageHandOff(env.batchStager, bq.stream),
		Name:    "amqp batch consumer " + bcfg.QueueName(bq.queue) + " -> stream " + bq.stream,
	})
	if err != nil {
		return usagef("%v", err)
	}
	if err := env.runtime.AddService(c); err != nil {
		return err
	}
	collector.AddBatchConsumer(c)
	return nil
}
