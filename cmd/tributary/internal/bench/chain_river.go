package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// chainStepArgs is a step of the bare River chain: its worker inserts the
// next step.
type chainStepArgs struct {
	Step int `json:"step"`
}

func (chainStepArgs) Kind() string { return "bench.chain_step" }

// chainStepWorker works the bare River chain: each step inserts the next
// one with River's Insert (which notifies the queue's producers as any
// insert does) and completes. It keeps each step's start (River's
// attempted_at) and the time the step began inserting the next one.
type chainStepWorker struct {
	river.WorkerDefaults[chainStepArgs]
	length int

	mu      sync.Mutex
	started []time.Time
	handed  []time.Time
	done    chan struct{}
}

func (w *chainStepWorker) Work(ctx context.Context, job *river.Job[chainStepArgs]) error {
	i := job.Args.Step
	w.mu.Lock()
	w.started[i] = *job.AttemptedAt
	w.mu.Unlock()
	if i == w.length-1 {
		close(w.done)
		return nil
	}
	handed := time.Now()
	w.mu.Lock()
	w.handed[i] = handed
	w.mu.Unlock()
	if _, err := river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, chainStepArgs{Step: i + 1}, nil); err != nil {
		return fmt.Errorf("error inserting chain step %d: %w", i+1, err)
	}
	return nil
}

// riverChain runs the chain's baseline: Length jobs on a bare River client
// configured like the workflows' runtime (River's own benchmark's fetch
// settings), each inserting the next. A hop is a step's hand-over (just
// before its insert of the next step) to the next step's start, what the
// workflow chain's hop measures from a task's recorded completion. Both are
// bounded below by River's fetch cooldown: a producer that fetched within
// the cooldown defers the fetch the next step's notification asks for to
// the cooldown's end (docs/decisions/0024-chain-hop-fetch-cooldown.md).
func riverChain(ctx context.Context, base *pgxpool.Pool, opts WorkflowsOptions) (ChainResult, error) {
	schema, drop, err := TempSchema(ctx, base, "bench_wf_river_chain")
	if err != nil {
		return ChainResult{}, err
	}
	defer drop()
	w := &chainStepWorker{length: opts.Length, started: make([]time.Time, opts.Length), handed: make([]time.Time, opts.Length), done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(base), &river.Config{
		Schema:            schema,
		Logger:            opts.Logger,
		FetchCooldown:     riverBenchFetchCooldown,
		FetchPollInterval: riverBenchFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverBenchMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return ChainResult{}, err
	}
	if err := client.Start(ctx); err != nil {
		return ChainResult{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	if _, err := client.Insert(ctx, chainStepArgs{}, nil); err != nil {
		return ChainResult{}, err
	}
	timeout := time.NewTimer(time.Duration(opts.Length) * time.Second)
	defer timeout.Stop()
	select {
	case <-w.done:
	case <-timeout.C:
		return ChainResult{}, errors.New("the River chain did not finish in time")
	case <-ctx.Done():
		return ChainResult{}, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	hops := make([]time.Duration, 0, opts.Length-1)
	for i := 1; i < opts.Length; i++ {
		hops = append(hops, w.started[i].Sub(w.handed[i-1]))
	}
	return hopStats(opts.Length, hops), nil
}

// hopStats is a chain's result from its hops.
func hopStats(length int, hops []time.Duration) ChainResult {
	res := ChainResult{Length: length}
	if len(hops) > 0 {
		slices.Sort(hops)
		res.P50, res.P99, res.Max = hops[(len(hops)-1)/2], hops[(len(hops)*99-1)/100], hops[len(hops)-1]
	}
	return res
}
