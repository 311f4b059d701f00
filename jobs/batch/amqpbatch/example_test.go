package amqpbatch_test

import (
	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/batch/amqpbatch"
	"github.com/tributary-run/tributary/queue"
)

// A batch-ACK consumer whose hand-off stages each batch of messages in one
// transaction: the consumer acks the batch only after that commit, and the
// flush jobs turn the staged items into objects.
func ExampleStageHandOff() {
	install := func(rt *queue.Runtime, bridgeCfg amqpbridge.Config) error {
		stager, err := batch.NewStager(rt.Client, batch.Config{})
		if err != nil {
			return err
		}
		consumer, err := amqpbridge.NewBatchConsumer(bridgeCfg, amqpbridge.BatchConsumerConfig{
			Queue:   "access-logs",
			HandOff: amqpbatch.StageHandOff(stager, "access_logs"),
		})
		if err != nil {
			return err
		}
		// After the flush worker and the publisher, so it stops before them.
		return rt.AddService(consumer)
	}
	_ = install // needs a broker and a database, so it is compiled, not run
}
