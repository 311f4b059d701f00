package main

import (
	"context"
	"errors"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/envconfig"
	"github.com/tributary-run/tributary/jobs/batch/amqpbatch"
)

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
	exchange, bq := cfg.OutboxExchange, cfg.AMQPBatchQueue
	if err := cfg.CheckBridgeNeeded(); err != nil || cfg.AMQP.URL == "" {
		return err
	}
	bcfg, err := cfg.Bridge(env.app.logger)
	if err != nil {
		return err
	}
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
	if bq.Queue != "" {
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

// addBatchConsumer runs a batch-ACK consumer on bq.Queue whose hand-off
// stages each batch into bq.Stream in one transaction; the batch is acked
// after the commit and written out by the flush worker like any staged
// items. Batch size and age are the S3_BATCH_* settings.
func addBatchConsumer(env *workerEnv, bcfg amqpbridge.Config, bq envconfig.BatchQueue, collector *amqpbridge.Collector) error {
	if env.batchStager == nil {
		return errors.New("the batch flushes must be installed before the AMQP batch consumer")
	}
	c, err := amqpbridge.NewBatchConsumer(bcfg, amqpbridge.BatchConsumerConfig{
		Queue:   bq.Queue,
		HandOff: amqpbatch.StageHandOff(env.batchStager, bq.Stream),
		Name:    "amqp batch consumer " + bcfg.QueueName(bq.Queue) + " -> stream " + bq.Stream,
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
