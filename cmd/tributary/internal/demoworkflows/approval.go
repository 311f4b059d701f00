package demoworkflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// ApprovalTimeoutDefault is demo.approval's wait when its input names none.
const ApprovalTimeoutDefault = 30 * time.Second

// WorkflowsIIConfig configures the Workflows II demos.
type WorkflowsIIConfig struct {
	// StepFunc, when set, runs inside each durable step of demo.approval
	// (in the step's transaction, a StepTx) with the workflow's id and the
	// step's name: the chaos test counts side effects with it.
	//
	// Defaults to none.
	StepFunc func(ctx context.Context, tx pgx.Tx, workflowID, step string) error
}

// RegisterWorkflowsII registers the Workflows II demos in reg and their
// workers in rt: demo.approval {"timeout":"30s"} (a step, a wait for the
// signal "approve", a step) and demo.expand {"n":N} (a task that adds N
// tasks at run time, and a fan-in that sums their outputs).
func RegisterWorkflowsII(reg *workflow.Registry, rt *queue.Runtime, cfg WorkflowsIIConfig) error {
	if err := reg.Register("demo.approval", buildApproval); err != nil {
		return err
	}
	if err := reg.Register("demo.expand", buildExpand); err != nil {
		return err
	}
	queue.AddWorker(rt, &approvalWorker{cfg: cfg})
	queue.AddWorker(rt, &expandSplitWorker{})
	queue.AddWorker(rt, &expandItemWorker{})
	queue.AddWorker(rt, &expandSumWorker{})
	return nil
}

// ApprovalInput is demo.approval's input.
type ApprovalInput struct {
	// Timeout is how long the task waits for "approve", as a Go duration
	// ("30s"); then it records a rejection. Defaults to 30s.
	Timeout string `json:"timeout"`
}

// ApprovalArgs is demo.approval's one task.
type ApprovalArgs struct {
	TimeoutMS int64 `json:"timeout_ms"`
}

// Kind returns "demo.approval".
func (ApprovalArgs) Kind() string { return "demo.approval" }

// ApprovalOutput is the task's output.
type ApprovalOutput struct {
	RequestedAt time.Time       `json:"requested_at"`
	Approved    bool            `json:"approved"`
	Signal      json.RawMessage `json:"signal,omitempty"`
	DecidedAt   time.Time       `json:"decided_at"`
}

func buildApproval(wf *workflow.Workflow, input json.RawMessage) error {
	var in ApprovalInput
	if err := decodeInput(input, &in, `{"timeout":"30s"}`); err != nil {
		return err
	}
	timeout := ApprovalTimeoutDefault
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("invalid timeout %q: want a positive Go duration such as \"30s\"", in.Timeout)
		}
		timeout = d
	}
	wf.Add("approval", ApprovalArgs{TimeoutMS: timeout.Milliseconds()}, nil)
	return nil
}

type approvalWorker struct {
	river.WorkerDefaults[ApprovalArgs]
	cfg WorkflowsIIConfig
}

func (w *approvalWorker) step(ctx context.Context, tx pgx.Tx, name string) error {
	if w.cfg.StepFunc == nil {
		return nil
	}
	ref, _ := workflow.Current(ctx)
	return w.cfg.StepFunc(ctx, tx, ref.WorkflowID, name)
}

func (w *approvalWorker) Work(ctx context.Context, job *river.Job[ApprovalArgs]) error {
	requested, err := workflow.StepTx(ctx, "request", func(ctx context.Context, tx pgx.Tx) (time.Time, error) {
		return time.Now().UTC(), w.step(ctx, tx, "request")
	})
	if err != nil {
		return err
	}
	out := ApprovalOutput{RequestedAt: requested}
	sig, err := workflow.AwaitSignal[json.RawMessage](ctx, "approve", time.Duration(job.Args.TimeoutMS)*time.Millisecond)
	switch {
	case errors.Is(err, workflow.ErrSignalTimeout):
	case err != nil:
		return err // a *WaitError while waiting
	default:
		out.Approved, out.Signal = true, sig
	}
	out.DecidedAt, err = workflow.StepTx(ctx, "decide", func(ctx context.Context, tx pgx.Tx) (time.Time, error) {
		return time.Now().UTC(), w.step(ctx, tx, "decide")
	})
	if err != nil {
		return err
	}
	return workflow.SetOutput(ctx, out)
}
