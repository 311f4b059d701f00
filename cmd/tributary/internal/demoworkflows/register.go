package demoworkflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/strictjson"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// Register adds the demo workflows' task workers to a runtime (demo.approval
// with the default WorkflowsIIConfig; RegisterWorkflowsII takes another). The runtime
// also needs the workflow Coordinator (its middleware and Register).
func Register(rt *queue.Runtime) { RegisterWorkers(rt.Workers()) }

// RegisterWorkers adds the task workers to a bare River worker registry.
func RegisterWorkers(workers *river.Workers) {
	river.AddWorker(workers, &splitWorker{})
	river.AddWorker(workers, &partWorker{})
	river.AddWorker(workers, &sumWorker{})
	river.AddWorker(workers, &linkWorker{})
	river.AddWorker(workers, &approvalWorker{})
	river.AddWorker(workers, &expandSplitWorker{})
	river.AddWorker(workers, &expandItemWorker{})
	river.AddWorker(workers, &expandSumWorker{})
}

// AddTo registers the demo workflows' builders in reg.
func AddTo(reg *workflow.Registry) error {
	for name, build := range map[string]workflow.BuildFunc{
		FanoutName:      buildFanout,
		ChainName:       buildChain,
		"demo.approval": buildApproval,
		"demo.expand":   buildExpand,
	} {
		if err := reg.Register(name, build); err != nil {
			return err
		}
	}
	return nil
}

// NewRegistry returns a registry with the demo workflows.
func NewRegistry() (*workflow.Registry, error) {
	reg := workflow.NewRegistry()
	if err := AddTo(reg); err != nil {
		return nil, err
	}
	return reg, nil
}

// decodeInput reads a demo's input strictly: a JSON object with no unknown
// or repeated fields.
func decodeInput(input json.RawMessage, dst any, want string) error {
	if len(bytes.TrimSpace(input)) == 0 || bytes.Equal(bytes.TrimSpace(input), []byte("null")) {
		return fmt.Errorf("no input: want %s", want)
	}
	if err := strictjson.CheckNames(input, reflect.TypeOf(dst).Elem()); err != nil {
		return fmt.Errorf("input %.60s: %v", input, err)
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("input %.60s does not decode as %s: %v", input, want, err)
	}
	if dec.More() {
		return fmt.Errorf("input %.60s has more than one JSON value", input)
	}
	return nil
}
