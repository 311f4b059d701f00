package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/internal/bench"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type benchEventPayload struct {
	N int `json:"n"`
}

var benchEvent = events.Define[benchEventPayload]("bench.event", nil)

// eventsThroughput is the outcome of the throughput part.
type eventsThroughput struct {
	// DispatchBatch is the consumer's ConsumerConfig.DispatchBatch.
	DispatchBatch int           `json:"dispatch_batch"`
	Events        int           `json:"events"`
	Aggregates    int           `json:"aggregates"`
	Duration      time.Duration `json:"duration_ns"`
	EventsPerSec  float64       `json:"events_per_sec"`
	// Emitted and Forwarded are when the last event was written and when the
	// last outbox row was SENT, from the start: where the time went.
	Emitted   time.Duration `json:"emitted_ns"`
	Forwarded time.Duration `json:"forwarded_ns"`
}

// eventsLatency is the outcome of the steady-rate part.
type eventsLatency struct {
	DispatchBatch int           `json:"dispatch_batch"`
	TargetRate    int           `json:"target_rate"`
	AchievedRate  float64       `json:"achieved_rate"`
	Events        int           `json:"events"`
	P50           time.Duration `json:"p50_ns"`
	P90           time.Duration `json:"p90_ns"`
	P99           time.Duration `json:"p99_ns"`
	Max           time.Duration `json:"max_ns"`
	// ForwardP50 and ForwardP99 are the part from emit to SENT (the
	// forwarder's share), read from the outbox's created_at and sent_at.
	ForwardP50 time.Duration `json:"forward_p50_ns"`
	ForwardP99 time.Duration `json:"forward_p99_ns"`
}

func newBenchEventsCmd(a *app) *cobra.Command {
	var n, aggregates, rate, workers, dispatchBatch int
	var latencyFor time.Duration
	var asJSON, noNotify bool
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Emit N events and handle them through outbox, forwarder, bus and dispatch, beside bench jobs",
		Long: `Three parts, each on a fresh schema, in one process run:

  1. baseline: N demo.noop jobs inserted in batches and worked by tributary's
     runtime (the tributary side of ` + "`bench jobs`" + `);
  2. throughput: N events emitted in transactions of 1,000 while a worker
     runtime forwards and handles them with a no-op handler; events/s from
     the first emit to the last handler done. Once with one dispatch job per
     event (DispatchBatch 1), once with the consumer's DispatchBatch set to
     --dispatch-batch (default 100, the consumer default);
  3. latency: events emitted one per transaction at a steady --rate for
     --latency-for; time from the emit's commit to its handler's start, for
     the same two consumers.

--aggregates K spreads the events over K aggregates, so every handler call
goes through per-aggregate ordering (0: no aggregates). --no-notify emits
without NOTIFY (see EmitterConfig.NoNotify).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || rate < 1 || workers < 1 || aggregates < 0 {
				return usagef("-n, --rate and --workers must be at least 1 and --aggregates not negative")
			}
			if dispatchBatch < 1 || dispatchBatch > events.DispatchBatchMax {
				return usagef("invalid --dispatch-batch %d: want 1 to %d (1 skips the batched runs)", dispatchBatch, events.DispatchBatchMax)
			}
			batches := []int{1}
			if dispatchBatch > 1 {
				batches = append(batches, dispatchBatch)
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			// The emitters get a pool of their own, as an application's
			// request handlers would: a starved shared pool would measure
			// waiting for connections, not the event path.
			emitPool, err := benchPool(ctx, a, 16)
			if err != nil {
				return err
			}
			defer emitPool.Close()
			quiet := benchLogger(a)
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()

			base, err := bench.Tributary(ctx, pool, bench.JobsOptions{N: n, Logger: quiet})
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(a.stdout, "baseline   %8d demo.noop jobs in %7.2fs  %9.0f jobs/s\n", base.Jobs, base.Duration.Seconds(), base.JobsPerSec)
			}
			var tps []eventsThroughput
			for _, db := range batches {
				tp, err := benchEventsThroughput(ctx, pool, emitPool, quiet, n, aggregates, workers, db, noNotify)
				if err != nil {
					return err
				}
				tps = append(tps, tp)
				if !asJSON {
					fmt.Fprintf(a.stdout, "events     %8d events (%d aggregates, dispatch batch %d) in %7.2fs  %9.0f events/s  (%.2fx the baseline; all emitted at %.2fs, all SENT at %.2fs)\n",
						tp.Events, tp.Aggregates, db, tp.Duration.Seconds(), tp.EventsPerSec, tp.EventsPerSec/base.JobsPerSec, tp.Emitted.Seconds(), tp.Forwarded.Seconds())
				}
			}
			var lats []eventsLatency
			for _, db := range batches {
				lat, err := benchEventsLatency(ctx, pool, emitPool, quiet, rate, latencyFor, aggregates, workers, db, noNotify)
				if err != nil {
					return err
				}
				lats = append(lats, lat)
				if !asJSON {
					fmt.Fprintf(a.stdout, "latency    %d events at %d/s (achieved %.0f/s, dispatch batch %d), commit to handler start: p50 %s  p90 %s  p99 %s  max %s; emit to SENT p50 %s p99 %s\n",
						lat.Events, lat.TargetRate, lat.AchievedRate, db, ms(lat.P50), ms(lat.P90), ms(lat.P99), ms(lat.Max), ms(lat.ForwardP50), ms(lat.ForwardP99))
				}
			}
			if asJSON {
				ratios := make([]float64, len(tps))
				for i, tp := range tps {
					ratios[i] = tp.EventsPerSec / base.JobsPerSec
				}
				return a.printJSON(map[string]any{"baseline": base, "throughput": tps, "ratios": ratios, "latency": lats, "cpus": runtime.NumCPU()})
			}
			fmt.Fprintf(a.stdout, "(%d CPUs)\n", runtime.NumCPU())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&n, "n", "n", 100000, "events (and baseline jobs) for the throughput part")
	f.IntVar(&aggregates, "aggregates", 0, "spread events over this many aggregates (0: none)")
	f.IntVar(&rate, "rate", 500, "events per second in the latency part")
	f.DurationVar(&latencyFor, "latency-for", 20*time.Second, "length of the latency part")
	f.IntVar(&workers, "workers", 200, "dispatch workers of the benchmark runtime")
	f.IntVar(&dispatchBatch, "dispatch-batch", events.DispatchBatchDefault, "the batched consumer's DispatchBatch (default: the consumer default; 1: only the one-job-per-event runs)")
	f.BoolVar(&noNotify, "no-notify", false, "emit without NOTIFY; the forwarder finds events by polling")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	cpuProfileFlag(f, &cpuProfile)
	return cmd
}

// benchPool opens a pool of size conns on the configured database.
func benchPool(ctx context.Context, a *app, conns int) (*pgxpool.Pool, error) {
	cfg := a.cfg.Config
	sep := "?"
	if strings.Contains(cfg.DatabaseURL, "?") {
		sep = "&"
	}
	cfg.DatabaseURL += fmt.Sprintf("%spool_max_conns=%d", sep, conns)
	return queue.NewPool(ctx, cfg)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// benchRuntime starts a runtime on a fresh schema with the events machinery
// and one consumer whose handler calls onHandle.
func benchRuntime(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, workers, dispatchBatch int, noNotify bool, onHandle func(m events.Message[benchEventPayload])) (*queue.Runtime, *events.Emitter, func(), error) {
	schema, drop, err := bench.TempSchema(ctx, pool, "bench_events")
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "bench", DispatchBatch: dispatchBatch})
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	events.On(c, benchEvent, func(ctx context.Context, m events.Message[benchEventPayload]) error {
		onHandle(m)
		return nil
	})
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: schema, Logger: logger,
		FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Queues: map[string]int{river.QueueDefault: workers},
	})
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	if _, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, Forwarder: events.ForwarderConfig{BatchSize: 1000}}); err != nil {
		drop()
		return nil, nil, nil, err
	}
	reg, _ := events.NewRegistry(benchEvent)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: schema, Registry: reg, NoNotify: noNotify})
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	if err := rt.Start(ctx); err != nil {
		drop()
		return nil, nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
		drop()
	}
	return rt, em, stop, nil
}

func benchMeta(i, aggregates int) events.Meta {
	if aggregates == 0 {
		return events.Meta{}
	}
	return events.Meta{AggregateID: fmt.Sprintf("agg-%d", i%aggregates)}
}

func benchEventsThroughput(ctx context.Context, pool, emitPool *pgxpool.Pool, logger *slog.Logger, n, aggregates, workers, dispatchBatch int, noNotify bool) (eventsThroughput, error) {
	var handled atomic.Int64
	done := make(chan time.Time, 1)
	rt, em, stop, err := benchRuntime(ctx, pool, logger, workers, dispatchBatch, noNotify, func(m events.Message[benchEventPayload]) {
		if handled.Add(1) == int64(n) {
			done <- time.Now()
		}
	})
	if err != nil {
		return eventsThroughput{}, err
	}
	defer stop()
	start := time.Now()
	const perTx = 1000
	batch := make([]events.Emission, 0, perTx)
	for i := 0; i < n; i += perTx {
		batch = batch[:0]
		for j := i; j < min(n, i+perTx); j++ {
			batch = append(batch, events.Emission{Def: benchEvent, Payload: benchEventPayload{N: j}, Meta: benchMeta(j, aggregates)})
		}
		if _, err := em.EmitManyTx(ctx, emitPool, batch); err != nil {
			return eventsThroughput{}, err
		}
	}
	emitted := time.Since(start)
	forwarded := make(chan time.Duration, 1)
	go func() {
		q := queue.Qualify(rt.Schema(), `SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_outbox WHERE status <> 'SENT')`)
		for {
			var left bool
			if err := emitPool.QueryRow(ctx, q).Scan(&left); err != nil || !left {
				forwarded <- time.Since(start)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case last := <-done:
		d := last.Sub(start)
		var fwd time.Duration
		select {
		case fwd = <-forwarded:
		case <-time.After(5 * time.Second):
		}
		return eventsThroughput{DispatchBatch: dispatchBatch, Events: n, Aggregates: aggregates, Duration: d, EventsPerSec: float64(n) / d.Seconds(),
			Emitted: emitted, Forwarded: fwd}, nil
	case <-time.After(30 * time.Minute):
		return eventsThroughput{}, fmt.Errorf("only %d of %d events were handled within 30 minutes", handled.Load(), n)
	case <-ctx.Done():
		return eventsThroughput{}, ctx.Err()
	}
}

func benchEventsLatency(ctx context.Context, pool, emitPool *pgxpool.Pool, logger *slog.Logger, rate int, length time.Duration, aggregates, workers, dispatchBatch int, noNotify bool) (eventsLatency, error) {
	total := max(1, int(float64(rate)*length.Seconds()))
	var mu sync.Mutex
	committed := make(map[int]time.Time, total)
	started := make(map[int]time.Time, total)
	var handled atomic.Int64
	done := make(chan struct{})
	rt, em, stop, err := benchRuntime(ctx, pool, logger, workers, dispatchBatch, noNotify, func(m events.Message[benchEventPayload]) {
		now := time.Now()
		mu.Lock()
		started[m.Payload.N] = now
		mu.Unlock()
		if handled.Add(1) == int64(total) {
			close(done)
		}
	})
	if err != nil {
		return eventsLatency{}, err
	}
	defer stop()

	// A paced feed and a few emitters, each event in its own transaction, so
	// a slow commit does not hold up the schedule.
	feed := make(chan int, total)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range feed {
				if _, err := em.EmitTx(ctx, emitPool, benchEvent, benchEventPayload{N: i}, benchMeta(i, aggregates)); err != nil {
					errs <- err
					return
				}
				now := time.Now()
				mu.Lock()
				committed[i] = now
				mu.Unlock()
			}
		}()
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		feed <- i
	}
	close(feed)
	wg.Wait()
	emitted := time.Since(start)
	close(errs)
	for err := range errs {
		return eventsLatency{}, err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return eventsLatency{}, fmt.Errorf("only %d of %d events were handled", handled.Load(), total)
	}
	var fwd50, fwd99 float64
	if err := pool.QueryRow(ctx, queue.Qualify(rt.Schema(), `
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - created_at)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - created_at))
        FROM /*schema*/tributary_outbox`)).Scan(&fwd50, &fwd99); err != nil {
		return eventsLatency{}, fmt.Errorf("error reading forwarding lag: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, total)
	for i, c := range committed {
		lat = append(lat, max(0, started[i].Sub(c)))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return eventsLatency{DispatchBatch: dispatchBatch, TargetRate: rate, AchievedRate: float64(total) / emitted.Seconds(), Events: total,
		P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: lat[len(lat)-1],
		ForwardP50: time.Duration(fwd50 * float64(time.Second)), ForwardP99: time.Duration(fwd99 * float64(time.Second))}, nil
}
