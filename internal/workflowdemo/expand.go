package workflowdemo

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

// SplitArgs is demo.expand's first task: it adds N item tasks.
type SplitArgs struct {
	N int `json:"n"`
}

// Kind returns "demo.expand.split".
func (SplitArgs) Kind() string { return "demo.expand.split" }

// ItemArgs is one added task: it outputs I.
type ItemArgs struct {
	I int `json:"i"`
}

// Kind returns "demo.expand.item".
func (ItemArgs) Kind() string { return "demo.expand.item" }

// SumArgs is the fan-in: it sums the N items' outputs.
type SumArgs struct {
	N int `json:"n"`
}

// Kind returns "demo.expand.sum".
func (SumArgs) Kind() string { return "demo.expand.sum" }

func itemName(i int) string { return fmt.Sprintf("item-%d", i) }

func buildExpand(wf *workflow.Workflow, input json.RawMessage) error {
	var in ExpandInput
	if err := decodeStrict(input, &in); err != nil {
		return err
	}
	if in.N < 1 || in.N > ExpandMax {
		return fmt.Errorf("invalid n %d: want 1 to %d", in.N, ExpandMax)
	}
	wf.Add("split", SplitArgs{N: in.N}, nil)
	wf.Add("sum", SumArgs{N: in.N}, &workflow.TaskOpts{Deps: []string{"split"}})
	return nil
}

type splitWorker struct {
	river.WorkerDefaults[SplitArgs]
}

func (w *splitWorker) Work(ctx context.Context, job *river.Job[SplitArgs]) error {
	tasks := make([]workflow.ExpandTask, job.Args.N)
	for i := range tasks {
		tasks[i] = workflow.ExpandTask{Name: itemName(i), Args: ItemArgs{I: i}, Dependents: []string{"sum"}}
	}
	return workflow.Expand(ctx, nil, tasks...)
}

type itemWorker struct{ river.WorkerDefaults[ItemArgs] }

func (w *itemWorker) Work(ctx context.Context, job *river.Job[ItemArgs]) error {
	return workflow.SetOutput(ctx, job.Args.I)
}

type sumWorker struct{ river.WorkerDefaults[SumArgs] }

func (w *sumWorker) Work(ctx context.Context, job *river.Job[SumArgs]) error {
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
