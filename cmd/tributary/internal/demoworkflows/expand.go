package demoworkflows

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// ExpandMax is the largest n demo.expand takes.
const ExpandMax = 10_000

// ExpandInput is demo.expand's input.
type ExpandInput struct {
	// N is how many tasks the split task adds at run time (1 to ExpandMax).
	N int `json:"n"`
}

// ExpandSplitArgs is demo.expand's first task: it adds N item tasks.
type ExpandSplitArgs struct {
	N int `json:"n"`
}

// Kind returns "demo.expand.split".
func (ExpandSplitArgs) Kind() string { return "demo.expand.split" }

// ExpandItemArgs is one added task: it outputs I.
type ExpandItemArgs struct {
	I int `json:"i"`
}

// Kind returns "demo.expand.item".
func (ExpandItemArgs) Kind() string { return "demo.expand.item" }

// ExpandSumArgs is the fan-in: it sums the N items' outputs.
type ExpandSumArgs struct {
	N int `json:"n"`
}

// Kind returns "demo.expand.sum".
func (ExpandSumArgs) Kind() string { return "demo.expand.sum" }

func itemName(i int) string { return fmt.Sprintf("item-%d", i) }

func buildExpand(wf *workflow.Workflow, input json.RawMessage) error {
	var in ExpandInput
	if err := decodeInput(input, &in, `{"n":N}`); err != nil {
		return err
	}
	if in.N < 1 || in.N > ExpandMax {
		return fmt.Errorf("invalid n %d: want 1 to %d", in.N, ExpandMax)
	}
	//lint:ignore S1016 each task's args are its own type; that they match the input today is chance
	wf.Add("split", ExpandSplitArgs{N: in.N}, nil)
	//lint:ignore S1016 as above
	wf.Add("sum", ExpandSumArgs{N: in.N}, &workflow.TaskOpts{Deps: []string{"split"}})
	return nil
}

type expandSplitWorker struct {
	river.WorkerDefaults[ExpandSplitArgs]
}

func (w *expandSplitWorker) Work(ctx context.Context, job *river.Job[ExpandSplitArgs]) error {
	tasks := make([]workflow.ExpandTask, job.Args.N)
	for i := range tasks {
		tasks[i] = workflow.ExpandTask{Name: itemName(i), Args: ExpandItemArgs{I: i}, Dependents: []string{"sum"}}
	}
	return workflow.Expand(ctx, nil, tasks...)
}

type expandItemWorker struct {
	river.WorkerDefaults[ExpandItemArgs]
}

func (w *expandItemWorker) Work(ctx context.Context, job *river.Job[ExpandItemArgs]) error {
	return workflow.SetOutput(ctx, job.Args.I)
}

type expandSumWorker struct {
	river.WorkerDefaults[ExpandSumArgs]
}

func (w *expandSumWorker) Work(ctx context.Context, job *river.Job[ExpandSumArgs]) error {
	sum := 0
	for i := range job.Args.N {
		v, err := workflow.Output[int](ctx, itemName(i))
		if err != nil {
			return err
		}
		sum += v
	}
	return workflow.SetOutput(ctx, map[string]int{"sum": sum, "n": job.Args.N})
}
