// Package amqpbatch connects the AMQP batch-ACK consumer to batch staging:
// its hand-off stages each batch of messages in one Postgres transaction,
// and the consumer acks the batch only after that commit
// (ExampleStageHandOff).
//
// It lives apart from package batch so that batch does not depend on the
// AMQP bridge.
package amqpbatch
