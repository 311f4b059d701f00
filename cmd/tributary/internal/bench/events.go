package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type benchEventPayload struct {
	N int `json:"n"`
}

var benchEvent = events.Define[benchEventPayload]("bench.event", nil)

// EventsOptions configures RunEvents.
type EventsOptions struct {
	// N is the number of events (and baseline jobs) of the throughput part.
	N int
	// Aggregates spreads the events over this many aggregates, so every
	// handler call goes through per-aggregate ordering; 0: no aggregates.
	Aggregates int
	// Rate is the events per second of the latency part, for LatencyFor.
	Rate       int
	LatencyFor time.Duration
	// Workers of the benchmark runtime's queue (EventsWorkersDefault when
	// the command line gives none).
	Workers int
	// DispatchBatch is the batched consumer's ConsumerConfig.DispatchBatch;
	// 1 runs only the one-job-per-event consumer.
	DispatchBatch int
	// NoNotify emits without NOTIFY (EmitterConfig.NoNotify).
	NoNotify bool
	// Rounds is how many times the throughput part runs, each round the
	// two baselines and then the events, so that each ratio compares runs
	// seconds apart; the report gives the medians. 0 is 1.
	Rounds int
	// BatchedOnly skips the one-job-per-event consumer's runs (throughput
	// and latency): an A/B of the batched path in a third of the time.
	BatchedOnly bool
	// EmitPool is the emitters' own pool, as an application's request
	// handlers would have: a starved shared pool would measure waiting for
	// connections, not the event path.
	EmitPool *pgxpool.Pool
	Logger   *slog.Logger
}

// EventsReport is the outcome of RunEvents.
type EventsReport struct {
	// Baseline and Throughput are the median rounds (by rate) of the
	// runtime's plain jobs and of each consumer's events.
	Baseline   JobsResult         `json:"baseline"`
	Throughput []EventsThroughput `json:"throughput"`
	// Ratios are, for each consumer, the median over the rounds of its
	// events/s over the same round's baseline jobs/s.
	Ratios []float64 `json:"ratios"`
	// River is the same N demo.noop jobs on a bare River client (BareRiver),
	// and RiverRatios the throughput runs' events/s over its jobs/s: since
	// tributary's runtime completes plain successes with a shorter statement
	// than River's, its plain jobs run faster than River's, and the first
	// ratio does not read as "against River".
	River       JobsResult `json:"river"`
	RiverRatios []float64  `json:"river_ratios"`
	// Rounds holds every round of the throughput part.
	Rounds  []EventsRound   `json:"rounds"`
	Latency []EventsLatency `json:"latency"`
	CPUs    int             `json:"cpus"`
}

// EventsThroughput is the outcome of the throughput part.
type EventsThroughput struct {
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
	// SelfCPUPerEvent and DBCPUPerEvent are the CPU this process (emits,
	// forwarding, handling) and the Postgres backends of its two pools
	// spent per event from the first emit to the last handler done: a
	// figure a busy machine moves less than the rate.
	SelfCPUPerEvent time.Duration `json:"self_cpu_per_event_ns"`
	DBCPUPerEvent   time.Duration `json:"db_cpu_per_event_ns"`
}

// EventsLatency is the outcome of the steady-rate part.
type EventsLatency struct {
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
	// Stages split commit to handler start for the events that had a
	// dispatch job of their own (a lane's head, a lone dispatch; not a
	// lane event a chain ran): from the emit's commit to the start of the
	// forward round that sent it (the outbox's sent_at), from there to the
	// job's fetch or claim (its attempted_at: the round's own statements,
	// its commit, River's wake and fetch), and from there to the handler's
	// start. Medians, on one machine's clock.
	Stages *LatencyStages `json:"stages,omitempty"`
	// SelfCPUPerEvent, DBCPUPerEvent and EmitDBCPUPerEvent are the CPU per
	// event of this process (the emitters' goroutines included), of the
	// runtime's Postgres backends (forwarding, dispatch, completion) and of
	// the emitters' backends, from the first emit to the last handler start.
	SelfCPUPerEvent   time.Duration `json:"self_cpu_per_event_ns"`
	DBCPUPerEvent     time.Duration `json:"db_cpu_per_event_ns"`
	EmitDBCPUPerEvent time.Duration `json:"emit_db_cpu_per_event_ns"`
}

// LatencyStages is EventsLatency.Stages.
type LatencyStages struct {
	Events       int           `json:"events"`
	ToForwardP50 time.Duration `json:"to_forward_p50_ns"`
	ToFetchP50   time.Duration `json:"to_fetch_p50_ns"`
	ToHandlerP50 time.Duration `json:"to_handler_p50_ns"`
	// RoundP50 is the part of ToFetchP50 up to the forward round's commit,
	// where the server tracks commit timestamps (track_commit_timestamp);
	// 0 where it does not.
	RoundP50 time.Duration `json:"round_p50_ns,omitempty"`
}

// RunEvents measures the events path in three parts, each on a fresh
// schema: the baseline (N demo.noop jobs worked by tributary's runtime, the
// tributary side of RunJobs, and then by a bare River client, its other
// side); throughput (N events emitted in transactions of
// 1,000 while a runtime forwards and handles them with a no-op handler, once
// with one dispatch job per event and once with opts.DispatchBatch); and
// latency (events emitted one per transaction at opts.Rate, time from the
// emit's commit to its handler's start, for the same two consumers). The
// baselines and the throughput part run opts.Rounds times in turn, the
// latency part once after them. It writes a line per part to w, and with
// more than one round the medians and each round's ratios.
func RunEvents(ctx context.Context, pool *pgxpool.Pool, opts EventsOptions, w io.Writer) (*EventsReport, error) {
	batches := []int{1}
	if opts.DispatchBatch > 1 {
		batches = append(batches, opts.DispatchBatch)
	}
	if opts.BatchedOnly {
		if len(batches) == 1 {
			return nil, fmt.Errorf("invalid options: BatchedOnly with DispatchBatch %d leaves nothing to run", opts.DispatchBatch)
		}
		batches = batches[1:]
	}
	rep := &EventsReport{CPUs: runtime.NumCPU()}
	rounds := max(1, opts.Rounds)
	for r := range rounds {
		round, err := eventsRound(ctx, pool, opts, batches, r, rounds, w)
		if err != nil {
			return nil, err
		}
		rep.Rounds = append(rep.Rounds, round)
	}
	rep.summarize(batches)
	if rounds > 1 {
		fmt.Fprintf(w, "median of %d rounds: baseline %.0f jobs/s, bare River %.0f jobs/s\n", rounds, rep.Baseline.JobsPerSec, rep.River.JobsPerSec)
		for i, db := range batches {
			base, bare := rep.roundRatios(i)
			tp := rep.Throughput[i]
			fmt.Fprintf(w, "median     dispatch batch %d: %.0f events/s (CPU per event %s here + %s Postgres); median of the per-round ratios %.2fx the baseline, %s; %.2fx bare River, %s\n",
				db, tp.EventsPerSec, microsText(tp.SelfCPUPerEvent), microsText(tp.DBCPUPerEvent), rep.Ratios[i], spread(base), rep.RiverRatios[i], spread(bare))
		}
	}
	for _, db := range batches {
		checkpoint(ctx, pool, w, "before the latency part")
		lat, err := benchEventsLatency(ctx, pool, opts.EmitPool, opts.Logger, opts.Rate, opts.LatencyFor, opts.Aggregates, opts.Workers, db, opts.NoNotify)
		if err != nil {
			return nil, err
		}
		rep.Latency = append(rep.Latency, lat)
		fmt.Fprintf(w, "latency    %d events at %d/s (achieved %.0f/s, dispatch batch %d), commit to handler start: p50 %s  p90 %s  p99 %s  max %s; emit to SENT p50 %s p99 %s\n",
			lat.Events, lat.TargetRate, lat.AchievedRate, db, ms(lat.P50), ms(lat.P90), ms(lat.P99), ms(lat.Max), ms(lat.ForwardP50), ms(lat.ForwardP99))
		fmt.Fprintf(w, "           CPU per event %s here, %s Postgres for the runtime, %s Postgres for the emits\n",
			microsText(lat.SelfCPUPerEvent), microsText(lat.DBCPUPerEvent), microsText(lat.EmitDBCPUPerEvent))
		if st := lat.Stages; st != nil {
			fmt.Fprintf(w, "           the %d events with a job of their own, medians: commit to their forward round %s, round to fetch %s, fetch to handler %s\n",
				st.Events, ms(st.ToForwardP50), ms(st.ToFetchP50), ms(st.ToHandlerP50))
			if st.RoundP50 > 0 {
				fmt.Fprintf(w, "           of round to fetch, the round's start to its commit: %s (track_commit_timestamp)\n", ms(st.RoundP50))
			}
		}
	}
	fmt.Fprintf(w, "(%d CPUs)\n", rep.CPUs)
	return rep, nil
}

// EventsRound is one round of the throughput part: the two baselines,
// then each consumer's run, and their ratios.
type EventsRound struct {
	Baseline    JobsResult         `json:"baseline"`
	River       JobsResult         `json:"river"`
	Throughput  []EventsThroughput `json:"throughput"`
	Ratios      []float64          `json:"ratios"`
	RiverRatios []float64          `json:"river_ratios"`
}

// eventsRound runs round r (of rounds) of the throughput part: the
// runtime's plain jobs, a bare River client's, then the events of each
// dispatch batch, each on a fresh schema, so each ratio compares runs a
// few seconds apart.
func eventsRound(ctx context.Context, pool *pgxpool.Pool, opts EventsOptions, batches []int, r, rounds int, w io.Writer) (EventsRound, error) {
	var round EventsRound
	label := ""
	if rounds > 1 {
		label = fmt.Sprintf(" (round %d/%d)", r+1, rounds)
	}
	for _, side := range []struct {
		label string
		run   func(context.Context, *pgxpool.Pool, JobsOptions) (JobsResult, error)
		into  *JobsResult
	}{{"baseline", Tributary, &round.Baseline}, {"bare River", BareRiver, &round.River}} {
		checkpointQuiet(ctx, pool, w)
		var err error
		if *side.into, err = side.run(ctx, pool, JobsOptions{N: opts.N, Logger: opts.Logger}); err != nil {
			return round, err
		}
		res := *side.into
		fmt.Fprintf(w, "%-10s %8d demo.noop jobs in %7.2fs  %9.0f jobs/s  (CPU per job %s here + %s Postgres)%s\n",
			side.label, res.Jobs, res.Duration.Seconds(), res.JobsPerSec, microsText(res.SelfCPUPerJob), microsText(res.DBCPUPerJob), label)
	}
	base, bare := round.Baseline, round.River
	for _, db := range batches {
		checkpointQuiet(ctx, pool, w)
		tp, err := benchEventsThroughput(ctx, pool, opts.EmitPool, opts.Logger, opts.N, opts.Aggregates, opts.Workers, db, opts.NoNotify)
		if err != nil {
			return round, err
		}
		round.Throughput = append(round.Throughput, tp)
		round.Ratios = append(round.Ratios, tp.EventsPerSec/base.JobsPerSec)
		round.RiverRatios = append(round.RiverRatios, tp.EventsPerSec/bare.JobsPerSec)
		fmt.Fprintf(w, "events     %8d events (%d aggregates, dispatch batch %d, %d workers) in %7.2fs  %9.0f events/s  (%.2fx the baseline, %.2fx bare River; all emitted at %.2fs, all SENT at %.2fs; CPU per event %s here + %s Postgres)%s\n",
			tp.Events, tp.Aggregates, db, opts.Workers, tp.Duration.Seconds(), tp.EventsPerSec, tp.EventsPerSec/base.JobsPerSec, tp.EventsPerSec/bare.JobsPerSec, tp.Emitted.Seconds(), tp.Forwarded.Seconds(),
			microsText(tp.SelfCPUPerEvent), microsText(tp.DBCPUPerEvent), label)
	}
	return round, nil
}

// roundRatios are every round's ratios of the i-th consumer's run: to the
// runtime's plain jobs and to the bare River client's.
func (rep *EventsReport) roundRatios(i int) (base, bare []float64) {
	for _, round := range rep.Rounds {
		base, bare = append(base, round.Ratios[i]), append(bare, round.RiverRatios[i])
	}
	return base, bare
}

// summarize sets the report's baselines and throughput runs to the median
// rounds (by rate) and its ratios to the medians of the per-round ratios;
// with one round, that round's.
func (rep *EventsReport) summarize(batches []int) {
	n := len(rep.Rounds)
	bases, bares := make([]JobsResult, n), make([]JobsResult, n)
	for r, round := range rep.Rounds {
		bases[r], bares[r] = round.Baseline, round.River
	}
	rep.Baseline, rep.River = medianRound(bases), medianRound(bares)
	rep.Throughput, rep.Ratios, rep.RiverRatios = nil, nil, nil
	for i := range batches {
		tps := make([]EventsThroughput, n)
		for r, round := range rep.Rounds {
			tps[r] = round.Throughput[i]
		}
		base, bare := rep.roundRatios(i)
		slices.SortFunc(tps, func(a, b EventsThroughput) int { return cmp.Compare(a.EventsPerSec, b.EventsPerSec) })
		rep.Throughput = append(rep.Throughput, tps[(n-1)/2])
		rep.Ratios = append(rep.Ratios, median(base))
		rep.RiverRatios = append(rep.RiverRatios, median(bare))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func microsText(d time.Duration) string { return fmt.Sprintf("%.1f µs", micros(d)) }

// benchRuntime starts a runtime on a fresh schema with the events machinery
// and one consumer whose handler calls onHandle.
func benchRuntime(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, workers, dispatchBatch int, noNotify bool, onHandle func(m events.Message[benchEventPayload])) (*queue.Runtime, *events.Emitter, func(), error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_events")
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "bench", Queue: river.QueueDefault, DispatchBatch: dispatchBatch})
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
		FetchCooldown: riverBenchFetchCooldown, FetchPollInterval: riverBenchFetchPollInterval,
		Queues: map[string]int{river.QueueDefault: workers},
	})
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	if _, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, Forwarder: events.ForwarderConfig{ClaimSize: 1000}}); err != nil {
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

// eventsCPUPools opens the runtime's and the emitters' pools of an events
// part, each of its own so its backends' CPU is read (cpuPool).
func eventsCPUPools(ctx context.Context, basePool, baseEmitPool *pgxpool.Pool) (runtime, emit *cpuPool, err error) {
	if runtime, err = newCPUPool(ctx, basePool); err != nil {
		return nil, nil, err
	}
	if emit, err = newCPUPool(ctx, baseEmitPool); err != nil {
		runtime.Close()
		return nil, nil, err
	}
	return runtime, emit, nil
}

func benchEventsThroughput(ctx context.Context, basePool, baseEmitPool *pgxpool.Pool, logger *slog.Logger, n, aggregates, workers, dispatchBatch int, noNotify bool) (EventsThroughput, error) {
	cp, ep, err := eventsCPUPools(ctx, basePool, baseEmitPool)
	if err != nil {
		return EventsThroughput{}, err
	}
	defer cp.Close()
	defer ep.Close()
	pool, emitPool := cp.Pool, ep.Pool
	var handled atomic.Int64
	done := make(chan time.Time, 1)
	rt, em, stop, err := benchRuntime(ctx, pool, logger, workers, dispatchBatch, noNotify, func(m events.Message[benchEventPayload]) {
		if handled.Add(1) == int64(n) {
			done <- time.Now()
		}
	})
	if err != nil {
		return EventsThroughput{}, err
	}
	defer stop()
	mark, emitMark := cp.mark(), ep.mark()
	start := time.Now()
	const perTx = 1000
	batch := make([]events.Emission, 0, perTx)
	for i := 0; i < n; i += perTx {
		batch = batch[:0]
		for j := i; j < min(n, i+perTx); j++ {
			batch = append(batch, events.Emission{Def: benchEvent, Payload: benchEventPayload{N: j}, Meta: benchMeta(j, aggregates)})
		}
		if _, err := em.EmitMany(ctx, emitPool, batch); err != nil {
			return EventsThroughput{}, err
		}
	}
	emitted := time.Since(start)
	forwarded := make(chan time.Duration, 1)
	go func() {
		// Rows not yet forwarded, through the PENDING and CLAIMED partial
		// indexes: a "status <> 'SENT'" scanned the whole outbox every 20
		// ms, about 30 ms of a Postgres core each time at 100,000 rows,
		// taken from the run it measured.
		q := queue.Qualify(rt.Schema(), `SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_outbox WHERE status = 'PENDING')
    OR EXISTS (SELECT 1 FROM /*schema*/tributary_outbox WHERE status = 'CLAIMED')`)
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
		self, db := cp.since(mark)
		_, emitDB := ep.since(emitMark)
		var fwd time.Duration
		select {
		case fwd = <-forwarded:
		case <-time.After(5 * time.Second):
		}
		return EventsThroughput{DispatchBatch: dispatchBatch, Events: n, Aggregates: aggregates, Duration: d, EventsPerSec: float64(n) / d.Seconds(),
			Emitted: emitted, Forwarded: fwd,
			SelfCPUPerEvent: self / time.Duration(n), DBCPUPerEvent: (db + emitDB) / time.Duration(n)}, nil
	case <-time.After(30 * time.Minute):
		return EventsThroughput{}, fmt.Errorf("only %d of %d events were handled within 30 minutes", handled.Load(), n)
	case <-ctx.Done():
		return EventsThroughput{}, ctx.Err()
	}
}

func benchEventsLatency(ctx context.Context, basePool, baseEmitPool *pgxpool.Pool, logger *slog.Logger, rate int, length time.Duration, aggregates, workers, dispatchBatch int, noNotify bool) (EventsLatency, error) {
	total := max(1, int(float64(rate)*length.Seconds()))
	// The CPU is read as in the throughput part: at a steady rate the fixed
	// costs of each round and transaction weigh more than in a backlog,
	// and a busy machine is slower at every step.
	cp, ep, err := eventsCPUPools(ctx, basePool, baseEmitPool)
	if err != nil {
		return EventsLatency{}, err
	}
	defer cp.Close()
	defer ep.Close()
	pool, emitPool := cp.Pool, ep.Pool
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
		return EventsLatency{}, err
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
				if _, err := em.Emit(ctx, emitPool, benchEvent, benchEventPayload{N: i}, benchMeta(i, aggregates)); err != nil {
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
	mark, emitMark := cp.mark(), ep.mark()
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
		return EventsLatency{}, err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return EventsLatency{}, fmt.Errorf("only %d of %d events were handled", handled.Load(), total)
	}
	self, db := cp.since(mark)
	_, emitDB := ep.since(emitMark)
	var fwd50, fwd99 float64
	if err := pool.QueryRow(ctx, queue.Qualify(rt.Schema(), `
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - created_at)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - created_at))
        FROM /*schema*/tributary_outbox`)).Scan(&fwd50, &fwd99); err != nil {
		return EventsLatency{}, fmt.Errorf("error reading forwarding lag: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	stages, err := latencyStages(ctx, pool, rt.Schema(), committed, started)
	if err != nil {
		return EventsLatency{}, err
	}
	lat := make([]time.Duration, 0, total)
	for i, c := range committed {
		lat = append(lat, max(0, started[i].Sub(c)))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return EventsLatency{DispatchBatch: dispatchBatch, TargetRate: rate, AchievedRate: float64(total) / emitted.Seconds(), Events: total,
		P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: lat[len(lat)-1],
		ForwardP50: time.Duration(fwd50 * float64(time.Second)), ForwardP99: time.Duration(fwd99 * float64(time.Second)),
		Stages:          stages,
		SelfCPUPerEvent: self / time.Duration(total), DBCPUPerEvent: db / time.Duration(total), EmitDBCPUPerEvent: emitDB / time.Duration(total)}, nil
}

// latencyStages reads, for every event of the latency part that had a
// dispatch job, when its forward round began and when its job was fetched
// (or claimed by a chain), and splits its commit-to-handler time there.
func latencyStages(ctx context.Context, pool *pgxpool.Pool, schema string, committed, started map[int]time.Time) (*LatencyStages, error) {
	attempts, err := riverjob.DispatchAttempts(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	type sentRow struct {
		n                    int
		sent, roundCommitted time.Time
	}
	rows, err := pool.Query(ctx, queue.Qualify(schema, `
        SELECT id::text, (payload ->> 'n')::int, sent_at,
               CASE WHEN current_setting('track_commit_timestamp')::bool THEN pg_xact_commit_timestamp(xmin) END
        FROM /*schema*/tributary_outbox WHERE sent_at IS NOT NULL`))
	if err != nil {
		return nil, fmt.Errorf("error reading the latency stages: %w", err)
	}
	sent := map[string]sentRow{}
	var id string
	var r sentRow
	var roundCommitted *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.n, &r.sent, &roundCommitted}, func() error {
		r.roundCommitted = time.Time{}
		if roundCommitted != nil {
			r.roundCommitted = *roundCommitted
		}
		sent[id] = r
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the latency stages: %w", err)
	}
	var toFwd, toFetch, toHandler, roundToCommit []time.Duration
	for _, a := range attempts {
		r, ok := sent[a.EventID]
		if !ok {
			continue
		}
		c, okc := committed[r.n]
		h, okh := started[r.n]
		if !okc || !okh {
			continue
		}
		toFwd = append(toFwd, r.sent.Sub(c))
		toFetch = append(toFetch, a.AttemptedAt.Sub(r.sent))
		toHandler = append(toHandler, h.Sub(a.AttemptedAt))
		if !r.roundCommitted.IsZero() {
			roundToCommit = append(roundToCommit, r.roundCommitted.Sub(r.sent))
		}
	}
	if len(toFwd) == 0 {
		return nil, nil
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	st := &LatencyStages{Events: len(toFwd), ToForwardP50: med(toFwd), ToFetchP50: med(toFetch), ToHandlerP50: med(toHandler)}
	if len(roundToCommit) == len(toFwd) {
		st.RoundP50 = med(roundToCommit)
	}
	return st, nil
}

// checkpoint asks Postgres for a checkpoint before a latency part, and
// says how long it took. The throughput part before it writes a few
// hundred megabytes of WAL, so Postgres is usually in the middle of a
// checkpoint it started for the WAL's size, writing and flushing the
// tables' pages while the latency part's commits wait for their own
// flushes: the p50 at 500 events/s reads 13-14 ms right after five
// throughput rounds and 8 ms alone. A checkpoint first finishes that work
// at once, so the part measures the rate it sets and not the one before
// it. A role that may not checkpoint (pg_checkpoint, Postgres 15) gets a
// line saying so, and the part runs anyway.
//
// The throughput part's runs each begin after one too (checkpointQuiet):
// a round's runs write WAL at different rates (one dispatch job per event
// the most), and a run that starts while Postgres is checkpointing for the
// WAL of the run before it pays for that run's pages as well as its own
// (its first change of each page after the checkpoint's start writes the
// whole page to the WAL), so a ratio would depend on which run follows the
// heaviest writer.
func checkpoint(ctx context.Context, pool *pgxpool.Pool, w io.Writer, what string) {
	if took, ok := checkpointOrSay(ctx, pool, w, what); ok {
		fmt.Fprintf(w, "checkpoint  %s: %s\n", what, ms(took))
	}
}

// checkpointQuiet is checkpoint before a throughput run, which prints
// only a failure (a role without pg_checkpoint).
func checkpointQuiet(ctx context.Context, pool *pgxpool.Pool, w io.Writer) {
	checkpointOrSay(ctx, pool, w, "before a throughput run")
}

// checkpointOrSay runs CHECKPOINT and returns how long it took, or writes
// to w that the one what names failed.
func checkpointOrSay(ctx context.Context, pool *pgxpool.Pool, w io.Writer, what string) (time.Duration, bool) {
	start := time.Now()
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(w, "checkpoint %s failed, which may run during one: %v\n", what, err)
		return 0, false
	}
	return time.Since(start), true
}
