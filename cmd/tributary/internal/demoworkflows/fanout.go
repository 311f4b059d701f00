package demoworkflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// FanoutName is the registered name of the fan-out demo.
const FanoutName = "demo.fanout"

// FanoutInput is demo.fanout's input.
type FanoutInput struct {
	// Width is the number of parts, 1 to workflow.MaxTasks-2.
	Width int `json:"width"`
	// Fail is how many of the parts (the last ones) fail for good, 0 to
	// Width.
	Fail int `json:"fail"`
}

// FanoutMaxWidth is the widest fan-out: the parts plus the split and sum
// tasks fit in one workflow.
const FanoutMaxWidth = workflow.MaxTasks - 2

// SplitArgs is the fan-out's first task; it outputs the width.
type SplitArgs struct {
	Width int `json:"width"`
}

// Kind returns "demo.fanout.split".
func (SplitArgs) Kind() string { return "demo.fanout.split" }

// PartArgs is one part of the fan-out: it outputs Index, or with Fail gives
// up for good (river.JobCancel), so its task fails.
type PartArgs struct {
	Index int  `json:"index"`
	Fail  bool `json:"fail,omitempty"`
}

// Kind returns "demo.fanout.part".
func (PartArgs) Kind() string { return "demo.fanout.part" }

// SumArgs is the fan-in: it sums the outputs of the Width parts that
// completed and outputs a SumOutput.
type SumArgs struct {
	Width int `json:"width"`
}

// Kind returns "demo.fanout.sum".
func (SumArgs) Kind() string { return "demo.fanout.sum" }

// SumOutput is the fan-in task's output.
type SumOutput struct {
	// Sum adds up the outputs of the parts that completed.
	Sum int64 `json:"sum"`
	// Parts counts those parts.
	Parts int `json:"parts"`
	// Missing names the parts without an output (failed ones).
	Missing []string `json:"missing,omitempty"`
}

// ErrPartFails is the error a failing part gives up with.
var ErrPartFails = errors.New("demo.fanout part fails on purpose")

// PartName is the task name of part i (1-based).
func PartName(i int) string { return fmt.Sprintf("part-%d", i) }

// ExpectedSum is the sum demo.fanout records for in: the parts 1 to
// Width-Fail complete and output their numbers.
func ExpectedSum(in FanoutInput) int64 {
	n := int64(in.Width - in.Fail)
	return n * (n + 1) / 2
}

// buildFanout adds demo.fanout's tasks: split, then part-1..part-N, then
// sum, which runs even when parts failed (DepFailureRun).
func buildFanout(wf *workflow.Workflow, input json.RawMessage) error {
	var in FanoutInput
	if err := decodeInput(input, &in, `{"width":N,"fail":K}`); err != nil {
		return err
	}
	if in.Width < 1 || in.Width > FanoutMaxWidth {
		return fmt.Errorf("invalid width %d: want 1 to %d", in.Width, FanoutMaxWidth)
	}
	if in.Fail < 0 || in.Fail > in.Width {
		return fmt.Errorf("invalid fail %d: want 0 to the width, %d", in.Fail, in.Width)
	}
	wf.Add("split", SplitArgs{Width: in.Width}, nil)
	parts := make([]string, in.Width)
	for i := range parts {
		parts[i] = PartName(i + 1)
		wf.Add(parts[i], PartArgs{Index: i + 1, Fail: i+1 > in.Width-in.Fail}, &workflow.TaskOpts{Deps: []string{"split"}})
	}
	wf.Add("sum", SumArgs{Width: in.Width}, &workflow.TaskOpts{Deps: parts, OnDepFailure: workflow.DepFailureRun})
	return nil
}

type splitWorker struct {
	river.WorkerDefaults[SplitArgs]
}

func (w *splitWorker) Work(ctx context.Context, job *river.Job[SplitArgs]) error {
	return workflow.SetOutput(ctx, job.Args.Width)
}

type partWorker struct{ river.WorkerDefaults[PartArgs] }

func (w *partWorker) Work(ctx context.Context, job *river.Job[PartArgs]) error {
	if job.Args.Fail {
		return river.JobCancel(fmt.Errorf("%w (part %d)", ErrPartFails, job.Args.Index))
	}
	return workflow.SetOutput(ctx, job.Args.Index)
}

type sumWorker struct{ river.WorkerDefaults[SumArgs] }

func (w *sumWorker) Work(ctx context.Context, job *river.Job[SumArgs]) error {
	var out SumOutput
	for i := 1; i <= job.Args.Width; i++ {
		n, err := workflow.Output[int64](ctx, PartName(i))
		switch {
		case errors.Is(err, workflow.ErrNoOutput):
			out.Missing = append(out.Missing, PartName(i))
		case err != nil:
			return err
		default:
			out.Sum += n
			out.Parts++
		}
	}
	return workflow.SetOutput(ctx, out)
}
