// Package demojobs holds the demo job kinds the tributary worker registers for
// `make run`, benchmarks and reliability tests: demo.noop, demo.sleep and
// demo.fail.
package demojobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/strictjson"
	"github.com/tributary-run/tributary/queue"
)

// NoopArgs is a job that does nothing.
type NoopArgs struct{}

// Kind returns "demo.noop".
func (NoopArgs) Kind() string { return "demo.noop" }

// SleepArgs is a job that sleeps for MS milliseconds, or until cancelled.
type SleepArgs struct {
	MS int `json:"ms"`
}

// Kind returns "demo.sleep".
func (SleepArgs) Kind() string { return "demo.sleep" }

// FailArgs is a job that fails its first Times attempts, then succeeds.
// Times < 0 fails always.
type FailArgs struct {
	Times int `json:"times"`
}

// Kind returns "demo.fail".
func (FailArgs) Kind() string { return "demo.fail" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (w *noopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error { return nil }

type sleepWorker struct {
	river.WorkerDefaults[SleepArgs]
}

// Timeout lets a long demo.sleep outlive River's default job timeout.
func (w *sleepWorker) Timeout(job *river.Job[SleepArgs]) time.Duration {
	return time.Duration(job.Args.MS)*time.Millisecond + time.Minute
}

func (w *sleepWorker) Work(ctx context.Context, job *river.Job[SleepArgs]) error {
	t := time.NewTimer(time.Duration(job.Args.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type failWorker struct{ river.WorkerDefaults[FailArgs] }

// ErrDemoFailure is what demo.fail returns while it is still meant to fail.
var ErrDemoFailure = errors.New("demo.fail: failing on purpose")

// NextRetry retries demo.fail after a second, so demos move quickly.
func (w *failWorker) NextRetry(job *river.Job[FailArgs]) time.Time {
	return time.Now().Add(time.Second)
}

func (w *failWorker) Work(ctx context.Context, job *river.Job[FailArgs]) error {
	if job.Args.Times < 0 || job.Attempt <= job.Args.Times {
		return fmt.Errorf("%w (attempt %d)", ErrDemoFailure, job.Attempt)
	}
	return nil
}

// Register adds the demo workers to a runtime.
func Register(rt *queue.Runtime) { RegisterWorkers(rt.Workers()) }

// RegisterWorkers adds the demo workers to a bare River worker registry.
func RegisterWorkers(workers *river.Workers) {
	river.AddWorker(workers, &noopWorker{})
	river.AddWorker(workers, &sleepWorker{})
	river.AddWorker(workers, &failWorker{})
}

// argsFor maps each demo kind to a fresh value of its args type, for
// validation of raw JSON.
func argsFor(kind string) (any, bool) {
	switch kind {
	case NoopArgs{}.Kind():
		return &NoopArgs{}, true
	case SleepArgs{}.Kind():
		return &SleepArgs{}, true
	case FailArgs{}.Kind():
		return &FailArgs{}, true
	}
	return nil, false
}

// Kinds lists the demo kinds.
func Kinds() []string {
	kinds := []string{NoopArgs{}.Kind(), SleepArgs{}.Kind(), FailArgs{}.Kind()}
	sort.Strings(kinds)
	return kinds
}

// ValidateArgs checks raw JSON against a demo kind's args strictly: it must
// be a JSON object, with no unknown fields, values of the right types, and
// one reading (strictjson: no repeated key, no key that matches a field
// only when case is ignored), the rule emit applies to event payloads.
// known is false for a kind that is not a demo kind.
func ValidateArgs(kind string, raw []byte) (known bool, err error) {
	dst, ok := argsFor(kind)
	if !ok {
		return false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return true, fmt.Errorf("arguments for %s do not fit: %w", kind, err)
	}
	if dec.More() {
		return true, fmt.Errorf("arguments for %s have trailing data after the JSON object", kind)
	}
	if err := strictjson.CheckNamesDecoded(raw, reflect.TypeOf(dst)); err != nil {
		return true, fmt.Errorf("arguments for %s do not fit: %w", kind, err)
	}
	if s, ok := dst.(*SleepArgs); ok && s.MS < 0 {
		return true, fmt.Errorf("demo.sleep ms %d must not be negative", s.MS)
	}
	return true, nil
}
