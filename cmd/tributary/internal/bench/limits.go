package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// LimitsOptions configures RunLimits.
type LimitsOptions struct {
	// N is the number of jobs each of the unbound sides works.
	N int
	// Rounds is how many times the two unbound sides alternate; the median
	// round of each counts. Defaults to 1.
	Rounds int
	// Rate is the binding rate limit's starts a second; its side works
	// 5×Rate jobs. 0 skips that side.
	Rate int
	// Workers is each runtime's queue concurrency. Defaults to 200.
	Workers int
	// Logger receives the runtimes' warnings.
	Logger *slog.Logger
}

// LimitsReport is the outcome of RunLimits.
type LimitsReport struct {
	// Plain and Declared are the median rounds of N demo.noop jobs without
	// limits and under a limit that matches every job and never binds;
	// Ratio is Declared's rate over Plain's (the target is at least 0.9).
	Plain    JobsResult `json:"plain"`
	Declared JobsResult `json:"declared"`
	Ratio    float64    `json:"ratio"`
	// RoundRatio is the median of the per-round ratios (the two sides of a
	// round run next to each other, so the load the machine carries moves
	// them alike), RoundRatios each of them.
	RoundRatio  float64   `json:"round_ratio"`
	RoundRatios []float64 `json:"round_ratios"`
	// Bound is the run under a binding rate limit of Rate a second;
	// BoundStartsPerSec its starts a second after the first Rate (which
	// start at once), from the jobs' attempted_at, BoundRatio that over
	// Rate (the target is 1 ± 0.05), and BoundBusiest the most starts any
	// one-second window held (at most Rate).
	Rate              int        `json:"rate,omitempty"`
	Bound             JobsResult `json:"bound"`
	BoundStartsPerSec float64    `json:"bound_starts_per_sec,omitempty"`
	BoundRatio        float64    `json:"bound_ratio,omitempty"`
	BoundBusiest      int        `json:"bound_busiest_window,omitempty"`
}

// RunLimits measures what limits cost: N demo.noop jobs on tributary's
// runtime without limits and with a limit declared that matches every job
// and never binds (Max far above the jobs' number), alternating for Rounds
// rounds, then 5×Rate jobs under a binding rate limit of Rate a second. It
// writes a line per run and the medians to w.
func RunLimits(ctx context.Context, pool *pgxpool.Pool, opts LimitsOptions, w io.Writer) (*LimitsReport, error) {
	if opts.Workers < 1 {
		opts.Workers = 200
	}
	rep := &LimitsReport{Rate: opts.Rate}
	var rounds [2][]JobsResult
	sides := []*limits.Limit{nil, {Name: "bench-unbound", Kind: demojobs.NoopArgs{}.Kind(), Max: 1 << 30}}
	names := []string{"no limits", "limit declared"}
	for r := 0; r < max(1, opts.Rounds); r++ {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			lres, err := runLimited(ctx, pool, opts, names[i], sides[i], opts.N)
			if err != nil {
				return nil, err
			}
			res := lres.JobsResult
			fmt.Fprintf(w, "round %d  %-16s %8d jobs in %8.2fs  %10.0f jobs/s  CPU per job %5.1f µs here + %5.1f µs Postgres  (insert %.2fs)\n",
				r+1, res.Name, res.Jobs, res.Duration.Seconds(), res.JobsPerSec, micros(res.SelfCPUPerJob), micros(res.DBCPUPerJob), lres.insert.Seconds())
			rounds[i] = append(rounds[i], res)
		}
	}
	rep.Plain, rep.Declared = medianRound(rounds[0]), medianRound(rounds[1])
	rep.Ratio = rep.Declared.JobsPerSec / rep.Plain.JobsPerSec
	fmt.Fprintf(w, "median: no limits %.0f jobs/s, limit declared (not binding) %.0f jobs/s, ratio %.2fx (target ≥ 0.9)\n",
		rep.Plain.JobsPerSec, rep.Declared.JobsPerSec, rep.Ratio)
	rates := func(rs []JobsResult) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = r.JobsPerSec
		}
		return out
	}
	rep.RoundRatios = ratios(rates(rounds[1]), rates(rounds[0]))
	rep.RoundRatio = median(rep.RoundRatios)
	fmt.Fprintf(w, "%s; their median %.2fx\n", spread(rep.RoundRatios), rep.RoundRatio)
	cpu := func(rs []JobsResult) string {
		var s, d []float64
		for _, r := range rs {
			s, d = append(s, micros(r.SelfCPUPerJob)), append(d, micros(r.DBCPUPerJob))
		}
		return fmt.Sprintf("%.1f µs here + %.1f µs Postgres", median(s), median(d))
	}
	fmt.Fprintf(w, "median CPU per job: no limits %s, limit declared %s\n", cpu(rounds[0]), cpu(rounds[1]))
	if opts.Rate > 0 {
		limit := &limits.Limit{Name: "bench-rate", Kind: demojobs.NoopArgs{}.Kind(), Rate: opts.Rate, Period: time.Second}
		res, err := runLimited(ctx, pool, opts, fmt.Sprintf("rate %d/s", opts.Rate), limit, 5*opts.Rate)
		if err != nil {
			return nil, err
		}
		rep.Bound = res.JobsResult
		rep.BoundStartsPerSec = res.startsPerSec
		rep.BoundRatio = res.startsPerSec / float64(opts.Rate)
		rep.BoundBusiest = res.busiest
		fmt.Fprintf(w, "binding rate limit %d/s: %d jobs in %.2fs; after the first %d (at once) %.0f starts/s, %.3fx the limit (target 1 ± 0.05); busiest one-second window %d starts\n",
			opts.Rate, res.Jobs, res.Duration.Seconds(), opts.Rate, res.startsPerSec, rep.BoundRatio, res.busiest)
	}
	return rep, nil
}

// limitedResult is a run of runLimited: its JobsResult, and with a rate
// limit its starts a second after the first Rate and the most starts any
// one-second window held.
type limitedResult struct {
	JobsResult
	// insert is how long inserting the jobs took, before the timed run.
	insert       time.Duration
	startsPerSec float64
	busiest      int
}

// runLimited works n demo.noop jobs on a fresh schema with tributary's
// runtime, under limit when it is not nil, and times from the start to the
// last completion.
func runLimited(ctx context.Context, base *pgxpool.Pool, opts LimitsOptions, name string, limit *limits.Limit, n int) (limitedResult, error) {
	schema, drop, err := TempSchema(ctx, base, "bench_limits")
	if err != nil {
		return limitedResult{}, err
	}
	defer drop()
	cfg := queue.RuntimeConfig{
		Schema: schema, Logger: opts.Logger,
		FetchCooldown: riverBenchFetchCooldown, FetchPollInterval: riverBenchFetchPollInterval,
		Queues: map[string]int{river.QueueDefault: opts.Workers},
	}
	var lim *limits.Limiter
	if limit != nil {
		if lim, err = limits.New(limits.Config{Schema: schema, Logger: opts.Logger, Limits: []limits.Limit{*limit}}); err != nil {
			return limitedResult{}, err
		}
		cfg.Middleware = []rivertype.Middleware{lim.Middleware()}
	}
	pool, err := newCPUPool(ctx, base)
	if err != nil {
		return limitedResult{}, err
	}
	defer pool.Close()
	rt, err := queue.NewRuntime(pool.Pool, cfg)
	if err != nil {
		return limitedResult{}, err
	}
	demojobs.Register(rt)
	if lim != nil {
		if _, err := lim.Register(rt); err != nil {
			return limitedResult{}, err
		}
	}
	if lim != nil {
		// Declared, as by the worker processes that ran before.
		if err := lim.Declare(ctx, pool); err != nil {
			return limitedResult{}, err
		}
	}
	inserting := time.Now()
	if err := enqueueNoops(ctx, rt.Client, n); err != nil {
		return limitedResult{}, err
	}
	mark := pool.mark()
	start := time.Now()
	if err := rt.Start(ctx); err != nil {
		return limitedResult{}, err
	}
	last, werr := waitCompletedRows(ctx, base, schema, n)
	self, db := pool.since(mark)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	_ = rt.Stop(stopCtx)
	if werr != nil {
		return limitedResult{}, werr
	}
	res := limitedResult{JobsResult: withCPU(result(name, n, last.Sub(start)), self, db), insert: start.Sub(inserting)}
	if limit != nil && limit.Rate > 0 && n > limit.Rate {
		// Rate jobs may start at once; the other n-Rate take the time from
		// the first start to the last. The busiest one-second window of
		// starts (each window beginning at a start) must hold at most Rate.
		spread, err := riverjob.JobStartSpread(ctx, base, schema)
		if err != nil {
			return limitedResult{}, err
		}
		res.busiest = spread.Busiest
		res.startsPerSec = float64(n-limit.Rate) / spread.Last.Sub(spread.First).Seconds()
	}
	return res, nil
}

// waitCompletedRows polls the completed jobs of schema every 10 ms until n
// completed, and returns when it saw them. A limited job may be completed
// by tributary's middleware before River's completer sees it, so River's
// completion events are not the measure here.
func waitCompletedRows(ctx context.Context, pool *pgxpool.Pool, schema string, n int) (time.Time, error) {
	for {
		done, err := riverjob.CountJobs(ctx, pool, schema, rivertype.JobStateCompleted)
		if err != nil {
			return time.Time{}, err
		}
		if done >= int64(n) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("benchmark stopped after %d of %d jobs: %w", done, n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// enqueueNoops inserts n demo.noop jobs in batches with the front door's
// batch insert (queue.Client.EnqueueMany, as App.EnqueueMany): River's
// fast batch insert in a transaction of its own, where a limited job may
// be admitted at insert.
func enqueueNoops(ctx context.Context, client *queue.Client, n int) error {
	batch := make([]queue.EnqueueItem, 0, insertBatchSize)
	for left := n; left > 0; left -= len(batch) {
		batch = batch[:0]
		for i := 0; i < min(left, insertBatchSize); i++ {
			batch = append(batch, queue.EnqueueItem{Args: demojobs.NoopArgs{}})
		}
		if _, err := client.EnqueueMany(ctx, batch); err != nil {
			return fmt.Errorf("error inserting benchmark jobs: %w", err)
		}
	}
	return nil
}
