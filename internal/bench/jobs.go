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

	"github.com/tributary-run/tributary/internal/demo"
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
	// Ratio is Tributary's rate over Baseline's.
	Ratio float64 `json:"ratio"`
	// Rounds holds every round: the bare River client's, then tributary's.
	Rounds [2][]JobsResult `json:"rounds"`
	CPUs   int             `json:"cpus"`
}

// RunJobs works N demo.noop jobs with tributary's runtime and with a bare
// River client configured like River's own benchmark, alternating the two
// for opts.Rounds rounds, and writes a line per round and the medians to w.
// The median round of each side counts, so a burst of load from elsewhere
// on the machine does not decide the result.
func RunJobs(ctx context.Context, pool *pgxpool.Pool, opts JobsOptions, w io.Writer) (*JobsReport, error) {
	rep := &JobsReport{CPUs: runtime.NumCPU()}
	for r := 0; r < max(1, opts.Rounds); r++ {
		for i, fn := range []func(context.Context, *pgxpool.Pool, JobsOptions) (JobsResult, error){BareRiver, Tributary} {
			res, err := fn(ctx, pool, opts)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(w, "round %d  %-18s %8d jobs in %8.2fs  %10.0f jobs/s\n", r+1, res.Name, res.Jobs, res.Duration.Seconds(), res.JobsPerSec)
			rep.Rounds[i] = append(rep.Rounds[i], res)
		}
	}
	rep.Baseline, rep.Tributary = medianRound(rep.Rounds[0]), medianRound(rep.Rounds[1])
	rep.Ratio = rep.Tributary.JobsPerSec / rep.Baseline.JobsPerSec
	fmt.Fprintf(w, "median: bare River %.0f jobs/s, tributary %.0f jobs/s, ratio %.2fx (%d CPUs)\n", rep.Baseline.JobsPerSec, rep.Tributary.JobsPerSec, rep.Ratio, rep.CPUs)
	return rep, nil
}

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
}

// insertNoops inserts n demo.noop jobs in batches with River's fast batch
// insert, through client.
func insertNoops(ctx context.Context, client *river.Client[pgx.Tx], n int) error {
	batch := make([]river.InsertManyParams, 0, insertBatchSize)
	for left := n; left > 0; left -= len(batch) {
		batch = batch[:0]
		for i := 0; i < min(left, insertBatchSize); i++ {
			batch = append(batch, river.InsertManyParams{Args: demo.NoopArgs{}})
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
func BareRiver(ctx context.Context, pool *pgxpool.Pool, opts JobsOptions) (JobsResult, error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_river")
	if err != nil {
		return JobsResult{}, err
	}
	defer drop()
	workers := river.NewWorkers()
	demo.RegisterWorkers(workers)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
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
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return JobsResult{}, err
	}
	last, werr := waitCompleted(ctx, events, opts.N)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	_ = client.Stop(stopCtx)
	if werr != nil {
		return JobsResult{}, werr
	}
	return result("bare River client", opts.N, last.Sub(start)), nil
}

// Tributary works N demo.noop jobs with tributary's Runtime, given the same
// fetch settings and concurrency as the bare client.
func Tributary(ctx context.Context, pool *pgxpool.Pool, opts JobsOptions) (JobsResult, error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_tributary")
	if err != nil {
		return JobsResult{}, err
	}
	defer drop()
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:            schema,
		Logger:            opts.Logger,
		FetchCooldown:     riverBenchFetchCooldown,
		FetchPollInterval: riverBenchFetchPollInterval,
		Queues:            map[string]int{river.QueueDefault: riverBenchMaxWorkers},
	})
	if err != nil {
		return JobsResult{}, err
	}
	demo.Register(rt)
	if err := insertNoops(ctx, rt.River(), opts.N); err != nil {
		return JobsResult{}, err
	}
	events, cancel := rt.River().SubscribeConfig(subscribeConfig(opts.N))
	defer cancel()
	start := time.Now()
	if err := rt.Start(ctx); err != nil {
		return JobsResult{}, err
	}
	last, werr := waitCompleted(ctx, events, opts.N)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	_ = rt.Stop(stopCtx)
	if werr != nil {
		return JobsResult{}, werr
	}
	return result("tributary runtime", opts.N, last.Sub(start)), nil
}

func result(name string, n int, d time.Duration) JobsResult {
	return JobsResult{Name: name, Jobs: n, Duration: d, JobsPerSec: rate(n, d)}
}
