package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

func newBenchEventsCmd(a *app) *cobra.Command {
	var o bench.EventsOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Emit N events and handle them through outbox, forwarder, bus and dispatch, beside bench jobs",
		Long: `Three parts, each on a fresh schema, in one process run:

  1. baseline: N demo.noop jobs inserted in batches and worked by tributary's
     runtime (the tributary side of ` + "`bench jobs`" + `), then by a bare
     River client (its other side); each event run prints its ratio to both;
  2. throughput: N events emitted in transactions of 1,000 while a worker
     runtime forwards and handles them with a no-op handler; events/s from
     the first emit to the last handler done. Once with one dispatch job per
     event (DispatchBatch 1), once with the consumer's DispatchBatch set to
     --dispatch-batch (default 100, the consumer default). Each run prints
     the CPU this process and Postgres spent per event over that span (the
     baseline's CPU per job excludes its inserts, which come before it);
  3. latency: events emitted one per transaction at a steady --rate for
     --latency-for; time from the emit's commit to its handler's start, for
     the same two consumers, with the CPU per event of this process and of
     Postgres, and where the time went for the events that had a dispatch
     job of their own: commit to the start of the forward round that sent
     them, the round's start to their job's fetch, the fetch to the
     handler (medians), and where Postgres tracks commit timestamps
     (track_commit_timestamp = on), the round's start to its commit. Each
     latency run begins with a CHECKPOINT, so it does not share the disk
     with the checkpoint the throughput part's WAL started.

The runtime of parts 2 and 3 has --workers worker slots, by default the
baselines' 2,000 (River's own benchmark's), and their fetch settings.

--aggregates K spreads the events over K aggregates, so every handler call
goes through per-aggregate ordering (0: no aggregates). --no-notify emits
without NOTIFY (see EmitterConfig.NoNotify). --batched-only skips the
one-job-per-event runs. --rounds R runs the baselines and the throughput
part R times in turn (each round: the runtime's plain jobs, the bare River
client, the events) and prints each round's ratios and their medians: the
baseline's own rate moves by a fifth between runs a minute apart on a
shared VM, so one round's ratio is a draw from that spread.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.N < 1 || o.Rate < 1 || o.Workers < 1 || o.Aggregates < 0 {
				return usagef("-n, --rate and --workers must be at least 1 and --aggregates not negative")
			}
			if o.Rounds < 1 {
				return usagef("invalid --rounds %d: want at least 1", o.Rounds)
			}
			if o.DispatchBatch < 1 || o.DispatchBatch > events.DispatchBatchMax {
				return usagef("invalid --dispatch-batch %d: want 1 to %d (1 skips the batched runs)", o.DispatchBatch, events.DispatchBatchMax)
			}
			if o.BatchedOnly && o.DispatchBatch == 1 {
				return usagef("--batched-only with --dispatch-batch 1 leaves nothing to run")
			}
			o.Logger = benchLogger(a)
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				emitPool, err := benchPool(ctx, a, 16)
				if err != nil {
					return nil, err
				}
				defer emitPool.Close()
				o.EmitPool = emitPool
				return bench.RunEvents(ctx, pool, o, w)
			})
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.N, "n", "n", 100000, "events (and baseline jobs) for the throughput part")
	f.IntVar(&o.Aggregates, "aggregates", 0, "spread events over this many aggregates (0: none)")
	f.IntVar(&o.Rate, "rate", 500, "events per second in the latency part")
	f.DurationVar(&o.LatencyFor, "latency-for", 20*time.Second, "length of the latency part")
	f.IntVar(&o.Workers, "workers", bench.EventsWorkersDefault, "dispatch workers of the benchmark runtime (default: the baselines' workers)")
	f.IntVar(&o.DispatchBatch, "dispatch-batch", events.DispatchBatchDefault, "the batched consumer's DispatchBatch (default: the consumer default; 1: only the one-job-per-event runs)")
	f.BoolVar(&o.NoNotify, "no-notify", false, "emit without NOTIFY; the forwarder finds events by polling")
	f.IntVar(&o.Rounds, "rounds", 1, "run the baselines and the throughput part this many times in turn and print the medians of the per-round ratios")
	f.BoolVar(&o.BatchedOnly, "batched-only", false, "skip the one-job-per-event runs (throughput and latency)")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

// benchPool opens a pool of size conns on the configured database, unless
// DATABASE_URL sets pool_max_conns: then that bound holds for this pool as
// for every other pool of the process. A test that starts the benchmark
// bounds its pools so, because the server's connections are shared with
// every other test running at once; a second pool_max_conns appended here
// would win over it.
func benchPool(ctx context.Context, a *app, conns int) (*pgxpool.Pool, error) {
	cfg := queue.Config{DatabaseURL: a.cfg.DatabaseURL, Schema: a.cfg.Schema}
	if strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		return queue.NewPool(ctx, cfg)
	}
	sep := "?"
	if strings.Contains(cfg.DatabaseURL, "?") {
		sep = "&"
	}
	cfg.DatabaseURL += fmt.Sprintf("%spool_max_conns=%d", sep, conns)
	return queue.NewPool(ctx, cfg)
}
