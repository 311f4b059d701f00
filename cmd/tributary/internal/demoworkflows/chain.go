package demoworkflows

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// ChainName is the registered name of the chain demo.
const ChainName = "demo.chain"

// ChainInput is demo.chain's input.
type ChainInput struct {
	// Length is the number of tasks, 1 to workflow.MaxTasks.
	Length int `json:"length"`
}

// LinkArgs is one task of the chain: it outputs its predecessor's output
// plus one (link 1 outputs 1), so the last link outputs the length.
type LinkArgs struct {
	Index int `json:"index"`
}

// Kind returns "demo.chain.link".
func (LinkArgs) Kind() string { return "demo.chain.link" }

// LinkName is the task name of link i (1-based).
func LinkName(i int) string { return fmt.Sprintf("link-%d", i) }

func buildChain(wf *workflow.Workflow, input json.RawMessage) error {
	var in ChainInput
	if err := decodeInput(input, &in, `{"length":N}`); err != nil {
		return err
	}
	if in.Length < 1 || in.Length > workflow.MaxTasks {
		return fmt.Errorf("invalid length %d: want 1 to %d", in.Length, workflow.MaxTasks)
	}
	for i := 1; i <= in.Length; i++ {
		var opts *workflow.TaskOpts
		if i > 1 {
			opts = &workflow.TaskOpts{Deps: []string{LinkName(i - 1)}}
		}
		wf.Add(LinkName(i), LinkArgs{Index: i}, opts)
	}
	return nil
}

type linkWorker struct{ river.WorkerDefaults[LinkArgs] }

func (w *linkWorker) Work(ctx context.Context, job *river.Job[LinkArgs]) error {
	if job.Args.Index <= 1 {
		return workflow.SetOutput(ctx, 1)
	}
	prev, err := workflow.Output[int](ctx, LinkName(job.Args.Index-1))
	if err != nil {
		return err
	}
	return workflow.SetOutput(ctx, prev+1)
}
