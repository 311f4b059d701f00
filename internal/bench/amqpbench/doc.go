// Package amqpbench measures the AMQP bridge beside bare amqp091-go loops in
// the same run, so the ratio holds on whatever machine runs it:
//
//   - publish with confirms: Publisher.PublishMany against a bare loop that
//     keeps the same confirm window (512) of DeferredConfirmations;
//   - inbound AMQP -> job: the Inbound bridge inserting River jobs (at its
//     own prefetch, Options.BridgePrefetch) against a bare consumer with
//     prefetch 300 and multiple acks that inserts nothing.
//
// `tributary bench amqp` calls Run.
package amqpbench
