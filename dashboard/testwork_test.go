package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// The dashboard's tests work their own small job kinds and workflows, so
// that they depend on nothing but the packages the dashboard shows: three
// job kinds (test.noop, test.sleep, test.fail) and three workflows
// (test.fanout, test.chain, test.approval).

type noopArgs struct{}

func (noopArgs) Kind() string { return "test.noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error { return nil }

// sleepArgs sleeps MS milliseconds, or until cancelled.
type sleepArgs struct {
	MS int `json:"ms"`
}

func (sleepArgs) Kind() string { return "test.sleep" }

type sleepWorker struct {
	river.WorkerDefaults[sleepArgs]
}

func (w *sleepWorker) Work(ctx context.Context, job *river.Job[sleepArgs]) error {
	t := time.NewTimer(time.Duration(job.Args.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failArgs fails its first Times attempts, then succeeds; Times < 0 fails
// always.
type failArgs struct {
	Times int `json:"times"`
}

func (failArgs) Kind() string { return "test.fail" }

type failWorker struct{ river.WorkerDefaults[failArgs] }

// NextRetry retries after a second, so a retried job is seen soon.
func (w *failWorker) NextRetry(job *river.Job[failArgs]) time.Time {
	return time.Now().Add(time.Second)
}

func (w *failWorker) Work(ctx context.Context, job *river.Job[failArgs]) error {
	if job.Args.Times < 0 || job.Attempt <= job.Args.Times {
		return fmt.Errorf("test.fail: failing on purpose (attempt %d)", job.Attempt)
	}
	return nil
}

// registerTestJobs adds the workers of the test job kinds.
func registerTestJobs(rt *queue.Runtime) {
	queue.AddWorker(rt, &noopWorker{})
	queue.AddWorker(rt, &sleepWorker{})
	queue.AddWorker(rt, &failWorker{})
}

const (
	fanoutName   = "test.fanout"
	chainName    = "test.chain"
	approvalName = "test.approval"
)

// errPartFails is what a failing fan-out part gives up with.
var errPartFails = errors.New("test.fanout part fails on purpose")

type splitArgs struct {
	Width int `json:"width"`
}

func (splitArgs) Kind() string { return "test.fanout.split" }

// partArgs outputs Index, or with Fail gives up for good (river.JobCancel),
// so its task fails.
type partArgs struct {
	Index int  `json:"index"`
	Fail  bool `json:"fail,omitempty"`
}

func (partArgs) Kind() string { return "test.fanout.part" }

// sumArgs sums the outputs of the parts that completed.
type sumArgs struct {
	Width int `json:"width"`
}

func (sumArgs) Kind() string { return "test.fanout.sum" }

type sumOutput struct {
	Sum   int64 `json:"sum"`
	Parts int   `json:"parts"`
}

func partName(i int) string { return fmt.Sprintf("part-%d", i) }

// buildFanout adds split, part-1..part-width (the last fail of them fail)
// and sum, which runs even when parts failed.
func buildFanout(wf *workflow.Workflow, input json.RawMessage) error {
	var in struct {
		Width int `json:"width"`
		Fail  int `json:"fail"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	wf.Add("split", splitArgs{Width: in.Width}, nil)
	parts := make([]string, in.Width)
	for i := range parts {
		parts[i] = partName(i + 1)
		wf.Add(parts[i], partArgs{Index: i + 1, Fail: i+1 > in.Width-in.Fail}, &workflow.TaskOpts{Deps: []string{"split"}})
	}
	wf.Add("sum", sumArgs{Width: in.Width}, &workflow.TaskOpts{Deps: parts, OnDepFailure: workflow.DepFailureRun})
	return nil
}

type splitWorker struct {
	river.WorkerDefaults[splitArgs]
}

func (w *splitWorker) Work(ctx context.Context, job *river.Job[splitArgs]) error {
	return workflow.SetOutput(ctx, job.Args.Width)
}

type partWorker struct{ river.WorkerDefaults[partArgs] }

func (w *partWorker) Work(ctx context.Context, job *river.Job[partArgs]) error {
	if job.Args.Fail {
		return river.JobCancel(fmt.Errorf("%w (part %d)", errPartFails, job.Args.Index))
	}
	return workflow.SetOutput(ctx, job.Args.Index)
}

type sumWorker struct{ river.WorkerDefaults[sumArgs] }

func (w *sumWorker) Work(ctx context.Context, job *river.Job[sumArgs]) error {
	var out sumOutput
	for i := 1; i <= job.Args.Width; i++ {
		n, err := workflow.Output[int64](ctx, partName(i))
		switch {
		case errors.Is(err, workflow.ErrNoOutput):
		case err != nil:
			return err
		default:
			out.Sum += n
			out.Parts++
		}
	}
	return workflow.SetOutput(ctx, out)
}

// linkArgs is one task of test.chain: it outputs its predecessor's output
// plus one.
type linkArgs struct {
	Index int `json:"index"`
}

func (linkArgs) Kind() string { return "test.chain.link" }

func linkName(i int) string { return fmt.Sprintf("link-%d", i) }

func buildChain(wf *workflow.Workflow, input json.RawMessage) error {
	var in struct {
		Length int `json:"length"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	for i := 1; i <= in.Length; i++ {
		var opts *workflow.TaskOpts
		if i > 1 {
			opts = &workflow.TaskOpts{Deps: []string{linkName(i - 1)}}
		}
		wf.Add(linkName(i), linkArgs{Index: i}, opts)
	}
	return nil
}

type linkWorker struct{ river.WorkerDefaults[linkArgs] }

func (w *linkWorker) Work(ctx context.Context, job *river.Job[linkArgs]) error {
	if job.Args.Index <= 1 {
		return workflow.SetOutput(ctx, 1)
	}
	prev, err := workflow.Output[int](ctx, linkName(job.Args.Index-1))
	if err != nil {
		return err
	}
	return workflow.SetOutput(ctx, prev+1)
}

// approvalArgs is test.approval's one task: a step, a wait for the signal
// "approve" of up to TimeoutMS, a step.
type approvalArgs struct {
	TimeoutMS int64 `json:"timeout_ms"`
}

func (approvalArgs) Kind() string { return "test.approval" }

func buildApproval(wf *workflow.Workflow, input json.RawMessage) error {
	var in struct {
		Timeout string `json:"timeout"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	timeout, err := time.ParseDuration(in.Timeout)
	if err != nil {
		return err
	}
	wf.Add("approval", approvalArgs{TimeoutMS: timeout.Milliseconds()}, nil)
	return nil
}

type approvalWorker struct {
	river.WorkerDefaults[approvalArgs]
}

func (w *approvalWorker) Work(ctx context.Context, job *river.Job[approvalArgs]) error {
	now := func(context.Context) (time.Time, error) { return time.Now().UTC(), nil }
	if _, err := workflow.Step(ctx, "request", now); err != nil {
		return err
	}
	_, err := workflow.AwaitSignal[json.RawMessage](ctx, "approve", time.Duration(job.Args.TimeoutMS)*time.Millisecond)
	if err != nil && !errors.Is(err, workflow.ErrSignalTimeout) {
		return err
	}
	_, err = workflow.Step(ctx, "decide", now)
	return err
}

// registerTestWorkflows adds the test workflows' task workers to rt.
func registerTestWorkflows(rt *queue.Runtime) {
	queue.AddWorker(rt, &splitWorker{})
	queue.AddWorker(rt, &partWorker{})
	queue.AddWorker(rt, &sumWorker{})
	queue.AddWorker(rt, &linkWorker{})
	queue.AddWorker(rt, &approvalWorker{})
}

// newTestWorkflowRegistry returns a registry that builds the test workflows
// by name.
func newTestWorkflowRegistry() (*workflow.Registry, error) {
	reg := workflow.NewRegistry()
	for name, build := range map[string]workflow.BuildFunc{
		fanoutName:   buildFanout,
		chainName:    buildChain,
		approvalName: buildApproval,
	} {
		if err := reg.Register(name, build); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
