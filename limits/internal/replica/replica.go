// Package replica is the workload of the limits replica tests: a job kind
// whose jobs sleep, limited per key, shared by the test and its worker
// processes (internal/testproc/limitworker).
package replica

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/limits"
)

// Args is one job: its partition key and how long it works.
type Args struct {
	Key    string `json:"key"`
	MS     int    `json:"ms"`
	Weight int    `json:"weight,omitempty"`
}

// Kind is the job kind.
func (Args) Kind() string { return "limits_replica_sleep" }

// Limit is the limit every process of the test declares: max jobs of a key
// at once.
func Limit(maxPerKey int) limits.Limit {
	return limits.Limit{Name: "replica-per-key", Kind: Args{}.Kind(), KeyArg: "key", Max: maxPerKey}
}

// RateLimit is the rate limit of the rate test: rate starts a second, all
// keys together, each job weighing its Weight.
func RateLimit(rate int) limits.Limit {
	return limits.Limit{Name: "replica-rate", Kind: Args{}.Kind(), Rate: rate, WeightArg: "weight"}
}

// RatedQueue is the queue of the jobs QueueRateLimit governs.
const RatedQueue = "rated"

// QueueRateLimit is the second limit of the chaos test: rate starts a
// second of the jobs in RatedQueue, all keys together, each job weighing
// its Weight. It is declared before Limit, which matches any queue.
func QueueRateLimit(rate int) limits.Limit {
	return limits.Limit{Name: "replica-queue-rate", Kind: Args{}.Kind(), Queue: RatedQueue, Rate: rate, WeightArg: "weight"}
}

// FairLimit is the limit of the fairness test: total jobs at once over
// all keys, served round-robin across keys.
func FairLimit(total int) limits.Limit {
	return limits.Limit{Name: "replica-fair", Kind: Args{}.Kind(), KeyArg: "key", Total: total}
}

// Worker sleeps for the job's MS.
type Worker struct {
	river.WorkerDefaults[Args]
}

// Work sleeps, or returns when ctx ends.
func (Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	select {
	case <-time.After(time.Duration(job.Args.MS) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
