package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/queue"
)

// River's own benchmark (cmd/river/riverbench) settings, used for both the
// bare baseline and tributary's runtime so the comparison is like for like.
const (
	riverBenchFetchCooldown     = 2 * time.Millisecond
	riverBenchFetchPollInterval = 20 * time.Millisecond
	riverBenchMaxWorkers        = 2000
	insertBatchSize             = 5000
)

// EventsWorkersDefault is the workers of bench events' runtime: the
// baselines' (riverBenchMaxWorkers), so both sides of a ratio run with the
// same worker slots. A lane chain holds its worker slot while each of its
// steps commits (docs/decisions/0002-lane-chains.md), so with fewer slots
// than the baselines (200, a tenth of theirs) the chains of 1,000 lanes run
// 9-14 % fewer events a second and the ratio measures the slots, not the
// dispatch.
const EventsWorkersDefault = riverBenchMaxWorkers

// JobsOptions configures RunJobs, BareRiver and Tributary.
type JobsOptions struct {
	// N is the number of jobs each side works.
	N int
	// Rounds is how many times RunJobs alternates the two sides; the median
	// round of each counts. Defaults to 1.
	Rounds int
	// Logger receives River's warnings; the benchmark itself prints nothing.
	Logger *slog.Logger
}

// JobsReport is the outcome of RunJobs.
type JobsReport struct {
	// Baseline and Tributary are the median rounds of each side.
	Baseline  JobsResult `json:"baseline"`
	Tributary JobsResult `json:"tributary"`
	// Ratio is Tributary's median rate over Baseline's.
	Ratio float64 `json:"ratio"`
	// RoundRatio is the median of the per-round ratios (tributary's rate
	// over the bare client's in the same round), RoundRatios each of them.
	RoundRatio  float64   `json:"round_ratio"`
	RoundRatios []float64 `json:"round_ratios"`
	// Rounds holds every round: the bare River client's, then tributary's.
	Rounds [2][]JobsResult `json:"rounds"`
	CPUs   int             `json:"cpus"`
}

// RunJobs works N demo.noop jobs with tributary's runtime and with a bare
// River client configured like River's own benchmark, for opts.Rounds
// rounds after an untimed warm-up round of each (a tenth of N: the first
// client of a process pays for connections, caches and the heap growing),
// and writes a line per round and the medians to w. The side that goes
// first alternates between rounds, so whatever drifts during a round pair
// (the load from elsewhere, the state the previous side's schema left in
// the server) falls on each side equally often. The median round of each
// side counts, so a burst of load from elsewhere on the machine does not
// decide the result; the median of the per-round ratios is printed beside
// it, with each side's CPU per job (this process and its Postgres
// backends), which does not depend on the machine's load.
func RunJobs(ctx context.Context, pool *pgxpool.Pool, opts JobsOptions, w io.Writer) (*JobsReport, error) {
	rep := &JobsReport{CPUs: runtime.NumCPU()}
	sides := []func(context.Context, *pgxpool.Pool, JobsOptions) (JobsResult, error){BareRiver, Tributary}
	warm := opts
	warm.N = max(opts.N/10, 1000)
	for _, fn := range sides {
		if _, err := fn(ctx, pool, warm); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(w, "warm-up: %d jobs on each side, untimed\n", warm.N)
	for r := 0; r < max(1, opts.Rounds); r++ {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			res, err := sides[i](ctx, pool, opts)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(w, "round %d  %-18s %8d jobs in %8.2fs  %10.0f jobs/s  CPU per job %5.1f µs here + %5.1f µs Postgres\n",
				r+1, res.Name, res.Jobs, res.Duration.Seconds(), res.JobsPerSec, micros(res.SelfCPUPerJob), micros(res.DBCPUPerJob))
			rep.Rounds[i] = append(rep.Rounds[i], res)
		}
	}
	rep.Baseline, rep.Tributary = medianRound(rep.Rounds[0]), medianRound(rep.Rounds[1])
	rep.Ratio = rep.Tributary.JobsPerSec / rep.Baseline.JobsPerSec
	rates := func(rs []JobsResult) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = r.JobsPerSec
		}
		return out
	}
	rep.RoundRatios = ratios(rates(rep.Rounds[1]), rates(rep.Rounds[0]))
	rep.RoundRatio = median(rep.RoundRatios)
	cpu := func(rs []JobsResult) (self, db float64) {
		var s, d []float64
		for _, r := range rs {
			s, d = append(s, micros(r.SelfCPUPerJob)), append(d, micros(r.DBCPUPerJob))
		}
		return median(s), median(d)
	}
	bs, bd := cpu(rep.Rounds[0])
	ts, td := cpu(rep.Rounds[1])
	fmt.Fprintf(w, "median: bare River %.0f jobs/s, tributary %.0f jobs/s, ratio %.2fx; median of the per-round ratios %.2fx, %s (%d CPUs)\n",
		rep.Baseline.JobsPerSec, rep.Tributary.JobsPerSec, rep.Ratio, rep.RoundRatio, spread(rep.RoundRatios), rep.CPUs)
	fmt.Fprintf(w, "median CPU per job: bare River %.1f µs here + %.1f µs Postgres, tributary %.1f µs + %.1f µs\n", bs, bd, ts, td)
	return rep, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// medianRound returns the round with the median throughput (the lower
// middle one for an even count).
func medianRound(rs []JobsResult) JobsResult {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b JobsResult) int { return cmp.Compare(a.JobsPerSec, b.JobsPerSec) })
	return sorted[(len(sorted)-1)/2]
}

// JobsResult is one side's outcome.
type JobsResult struct {
	Name       string        `json:"name"`
	Jobs       int           `json:"jobs"`
	Duration   time.Duration `json:"duration_ns"`
	JobsPerSec float64       `json:"jobs_per_sec"`
	// SelfCPUPerJob and DBCPUPerJob are the CPU this process and its
	// Postgres backends spent per job while the jobs were worked (zero when
	// not measured or the backends' /proc entries are not readable).
	SelfCPUPerJob time.Duration `json:"self_cpu_per_job_ns,omitempty"`
	DBCPUPerJob   time.Duration `json:"db_cpu_per_job_ns,omitempty"`
}

// insertNoops inserts n demo.noop jobs in batches with River's fast batch
// insert, through client.
func insertNoops(ctx context.Context, client *river.Client[pgx.Tx], n int) error {
	batch := make([]river.InsertManyParams, 0, insertBatchSize)
	for left := n; left > 0; left -= len(batch) {
		batch = batch[:0]
		for i := 0; i < min(left, insertBatchSize); i++ {
			batch = append(batch, river.InsertManyParams{Args: demojobs.NoopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, batch); err != nil {
			return fmt.Errorf("error inserting benchmark jobs: %w", err)
		}
	}
	return nil
}

// waitCompleted counts completion events until n arrived, and returns when
// the last one did.
func waitCompleted(ctx context.Context, events <-chan *river.Event, n int) (time.Time, error) {
	var last time.Time
	for done := 0; done < n; {
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("benchmark stopped after %d of %d jobs: %w", done, n, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return last, errors.New("subscription closed before every job completed")
			}
			if ev.Kind == river.EventKindJobCompleted {
				done++
				last = time.Now()
			}
		}
	}
	return last, nil
}

func subscribeConfig(n int) *river.SubscribeConfig {
	return &river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}}
}

// BareRiver works N demo.noop jobs on a bare River client configured like
// River's own benchmark.
func BareRiver(ctx context.Context, base *pgxpool.Pool, opts JobsOptions) (JobsResult, error) {
	schema, drop, err := TempSchema(ctx, base, "bench_river")
	if err != nil {
		return JobsResult{}, err
	}
	defer drop()
	pool, err := newCPUPool(ctx, base)
	if err != nil {
		return JobsResult{}, err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	demojobs.RegisterWorkers(workers)
	client, err := river.NewClient(riverpgxv5.New(pool.Pool), &river.Config{
		Schema:            schema,
		Logger:            opts.Logger,
		FetchCooldown:     riverBenchFetchCooldown,
		FetchPollInterval: riverBenchFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverBenchMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return JobsResult{}, err
	}
	if err := insertNoops(ctx, client, opts.N); err != nil {
		return JobsResult{}, err
	}
	events, cancel := client.SubscribeConfig(subscribeConfig(opts.N))
	defer cancel()
	mark := pool.mark()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return JobsResult{}, err
	}
	last, werr := waitCompleted(ctx, events, opts.N)
	self, db := pool.since(mark)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	_ = client.Stop(stopCtx)
	if werr != nil {
		return JobsResult{}, werr
	}
	return withCPU(result("bare River client", opts.N, last.Sub(start)), self, db), nil
}

// Tributary works N demo.noop jobs with tributary's Runtime, given the same
// fetch settings and concurrency as the bare client.
func Tributary(ctx context.Context, base *pgxpool.Pool, opts JobsOptions) (JobsResult, error) {
	schema, drop, err := TempSchema(ctx, base, "bench_tributary")
	if err != nil {
		return JobsResult{}, err
	}
	defer drop()
	pool, err := newCPUPool(ctx, base)
	if err != nil {
		return JobsResult{}, err
	}
	defer pool.Close()
	rt, err := queue.NewRuntime(pool.Pool, queue.RuntimeConfig{
		Schema:            schema,
		Logger:            opts.Logger,
		FetchCooldown:     riverBenchFetchCooldown,
		FetchPollInterval: riverBenchFetchPollInterval,
		Queues:            map[string]int{river.QueueDefault: riverBenchMaxWorkers},
	})
	if err != nil {
		return JobsResult{}, err
	}
	demojobs.Register(rt)
	if err := insertNoops(ctx, rt.River(), opts.N); err != nil {
		return JobsResult{}, err
	}
	events, cancel := rt.River().SubscribeConfig(subscribeConfig(opts.N))
	defer cancel()
	mark := pool.mark()
	start := time.Now()
	if err := rt.Start(ctx); err != nil {
		return JobsResult{}, err
	}
	last, werr := waitCompleted(ctx, events, opts.N)
	self, db := pool.since(mark)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	_ = rt.Stop(stopCtx)
	if werr != nil {
		return JobsResult{}, werr
	}
	return withCPU(result("tributary runtime", opts.N, last.Sub(start)), self, db), nil
}

func result(name string, n int, d time.Duration) JobsResult {
	return JobsResult{Name: name, Jobs: n, Duration: d, JobsPerSec: rate(n, d)}
}

// withCPU adds the CPU spent on r's jobs, self here and db by Postgres.
func withCPU(r JobsResult, self, db time.Duration) JobsResult {
	r.SelfCPUPerJob, r.DBCPUPerJob = self/time.Duration(r.Jobs), db/time.Duration(r.Jobs)
	return r
}
