package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/queue"
)

func newBenchAMQPCmd(a *app) *cobra.Command {
	var (
		n, rounds, bodyBytes         int
		prefetch, concurrency, batch int
		inboxWorkers                 int
		asJSON                       bool
	)
	cmd := &cobra.Command{
		Use:   "amqp",
		Short: "Publish-with-confirms and inbound AMQP -> inbox / job throughput beside bare amqp091-go loops",
		Long: `Publish N persistent messages with confirms through tributary's Publisher and
through a bare amqp091-go loop (confirm window 512). Then, beside a bare
consumer (prefetch 300, multiple ack) that inserts nothing, take as many in
with the inbound bridge (at its default prefetch and inserters unless
--bridge-prefetch / --inbound-concurrency / --inbound-batch say otherwise)
three ways: into an inbox (jobs/inbox/amqpinbox.Statements: one batch row and
one River job per transaction, sent in one round trip), as one River job per message
(amqpbridge.JobInserter), and into the event bus (amqpbridge.EventInserter,
one consumer with batched dispatch that nothing works). Jobs, inbox batches
and events go to temporary schemas that are dropped afterwards. Each side's
queue is consumed right after it was filled, so every consume finds the
broker in the same state, and after a CHECKPOINT, so it does not pay for the
pages the side before it wrote. A round runs the bare loop and the inbox side
next to each other, then the others; every other round the order is reversed
(--rounds R rounds). It prints every round with its order, the median rates,
and the median of the per-round ratios (the two runs of a round follow each
other, so load from elsewhere hits both alike) beside the goals: publish >=
0.8x, inbound >= 0.8x (issue 15; the inbox side, with the per-message job
side printed beside it). Last, a runtime with the inbox
installed (a no-op handler, --inbox-workers River workers) handles the last
round's inbox backlog, and the messages/s it handles are printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || rounds < 1 || bodyBytes < 2 {
				return usagef("-n %d, --rounds %d and --body-bytes %d must be positive", n, rounds, bodyBytes)
			}
			if inboxWorkers < 1 {
				return usagef("--inbox-workers %d must be at least 1", inboxWorkers)
			}
			if prefetch < 1 || concurrency < 0 || batch < 0 {
				return usagef("--bridge-prefetch %d must be at least 1, and --inbound-concurrency %d and --inbound-batch %d not negative", prefetch, concurrency, batch)
			}
			report := a.stdout
			if asJSON {
				report = a.stderr
			}
			return a.runBench(cmd.Context(), asJSON, report, func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				// The inbound bridge's jobs and inbox batches go to a schema of
				// their own.
				schema, drop, err := bench.TempSchema(ctx, pool, "bench_amqp")
				if err != nil {
					return nil, err
				}
				defer drop()
				client, err := queue.NewClient(pool, queue.ClientConfig{Schema: schema, Logger: a.logger})
				if err != nil {
					return nil, err
				}
				quiet := benchLogger(a)
				bus, stopBus, err := bench.AMQPEventBus(ctx, pool, quiet)
				if err != nil {
					return nil, err
				}
				defer stopBus()
				return bench.RunAMQP(ctx, bench.AMQPOptions{
					URL: a.cfg.AMQP.Bridge.URL, Messages: n, Rounds: rounds, BodyBytes: bodyBytes,
					DB: pool, Jobs: client, Bus: bus, Logger: quiet,
					BridgePrefetch: prefetch, InboundConcurrency: concurrency, InboundBatchSize: batch,
					InboxSchema: schema, InboxWorkers: inboxWorkers,
				}, w)
			})
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 100000, "messages per measurement (long enough that the bare loop is measured at its sustained rate, not a burst)")
	cmd.Flags().IntVar(&rounds, "rounds", 5, "alternate the two sides this many times; medians count")
	cmd.Flags().IntVar(&bodyBytes, "body-bytes", 200, "size of each JSON body")
	cmd.Flags().IntVar(&prefetch, "bridge-prefetch", amqpbridge.InboundPrefetchDefault, "the inbound bridge's prefetch")
	cmd.Flags().IntVar(&concurrency, "inbound-concurrency", 0, fmt.Sprintf("the inbound bridge's concurrent inserting transactions (0: its default, %d for River jobs and the event bus, %d for the inbox's one-round-trip inserts)",
		amqpbridge.InboundConcurrencyDefault, amqpbridge.InboundStatementsConcurrencyDefault))
	cmd.Flags().IntVar(&batch, "inbound-batch", 0, "the most messages per inserting transaction (0: prefetch / concurrency)")
	cmd.Flags().IntVar(&inboxWorkers, "inbox-workers", bench.AMQPInboxWorkersDefault, "River workers of the runtime that handles the last round's inbox backlog")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document (the report goes to stderr)")
	return cmd
}
