package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// OutputMaxBytesDefault is the default bound of one task's output.
const OutputMaxBytesDefault = 256 << 10

// TaskRef identifies the workflow task a job is.
type TaskRef struct {
	WorkflowID string `json:"workflow_id"`
	Task       string `json:"task"`
	JobID      int64  `json:"job_id"`
}

// taskContext is what the Coordinator's middleware puts in a task's
// context: who the task is, its output once set, and its dependencies'
// outputs once read.
type taskContext struct {
	c   *Coordinator
	ref TaskRef

	mu        sync.Mutex
	dur       durable         // the run's steps (step.go)
	expand    []*taskDef      // tasks Expand staged for the completion (expand.go)
	output    json.RawMessage // nil until SetOutput
	depsRead  bool
	deps      map[string]storedOutput
	unrelated map[string]storedOutput
}

type storedOutput struct {
	state  TaskState
	output json.RawMessage
}

type taskContextKey struct{}

func withTask(ctx context.Context, tc *taskContext) context.Context {
	return context.WithValue(ctx, taskContextKey{}, tc)
}

func taskFrom(ctx context.Context) (*taskContext, error) {
	tc, _ := ctx.Value(taskContextKey{}).(*taskContext)
	if tc == nil {
		return nil, ErrNotInTask
	}
	return tc, nil
}

// Current returns the task the context's job is, inside a workflow task's
// Work; false elsewhere.
func Current(ctx context.Context) (TaskRef, bool) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return TaskRef{}, false
	}
	return tc.ref, true
}

// SetOutput records v (encoded as JSON) as the running task's output. It is
// written in the transaction that completes the task, so it exists exactly
// when the task completed, and dependents read it with Output. A later call
// replaces an earlier one; an attempt that fails records nothing. The JSON
// may be at most the Coordinator's OutputMaxBytes (256 KiB by default):
// put larger results elsewhere and output a reference.
func SetOutput(ctx context.Context, v any) error {
	tc, err := taskFrom(ctx)
	if err != nil {
		return fmt.Errorf("workflow.SetOutput: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("error encoding the output of task %q: %w", tc.ref.Task, err)
	}
	if len(b) > tc.c.cfg.OutputMaxBytes {
		return &OutputTooLargeError{Task: tc.ref.Task, Bytes: len(b), Max: tc.c.cfg.OutputMaxBytes}
	}
	tc.mu.Lock()
	tc.output = b
	tc.mu.Unlock()
	return nil
}

// Output decodes the output of task (a task of the running task's
// workflow, normally one of its dependencies) into a T. A task that has not
// completed, or completed without SetOutput, is ErrNoOutput (say, a
// dependency that was skipped, or failed under DepFailureRun); a name that
// is no task of the workflow is ErrUnknownTask. Dependencies' outputs are
// read from the database once per attempt, all in one query.
//
//	charge, err := workflow.Output[ChargeResult](ctx, "charge")
func Output[T any](ctx context.Context, task string) (T, error) {
	var v T
	raw, err := OutputJSON(ctx, task)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("error decoding the output of task %q into %T: %w", task, v, err)
	}
	return v, nil
}

// OutputJSON is Output without decoding.
func OutputJSON(ctx context.Context, task string) (json.RawMessage, error) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return nil, fmt.Errorf("workflow.Output: %w", err)
	}
	o, err := tc.read(ctx, task)
	if err != nil {
		return nil, err
	}
	if o.state != TaskCompleted || o.output == nil {
		return nil, fmt.Errorf("task %q of workflow %s has no output (it is %s): %w", task, tc.ref.WorkflowID, o.state, ErrNoOutput)
	}
	return o.output, nil
}

func (tc *taskContext) read(ctx context.Context, task string) (storedOutput, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !tc.depsRead {
		rows, err := tc.c.pool.Query(ctx, tc.c.sql.depOutputs, customPlan, tc.ref.WorkflowID, tc.ref.Task)
		if err != nil {
			return storedOutput{}, ownRecord(fmt.Errorf("error reading the outputs of task %q's dependencies: %w", tc.ref.Task, err))
		}
		deps := map[string]storedOutput{}
		for rows.Next() {
			var name string
			var o storedOutput
			if err := rows.Scan(&name, &o.state, &o.output); err != nil {
				rows.Close()
				return storedOutput{}, ownRecord(fmt.Errorf("error reading the outputs of task %q's dependencies: %w", tc.ref.Task, err))
			}
			deps[name] = o
		}
		if err := rows.Err(); err != nil {
			return storedOutput{}, ownRecord(fmt.Errorf("error reading the outputs of task %q's dependencies: %w", tc.ref.Task, err))
		}
		tc.deps, tc.depsRead = deps, true
	}
	if o, ok := tc.deps[task]; ok {
		return o, nil
	}
	if o, ok := tc.unrelated[task]; ok {
		return o, nil
	}
	var o storedOutput
	err := tc.c.pool.QueryRow(ctx, tc.c.sql.taskOutput, customPlan, tc.ref.WorkflowID, task).Scan(&o.state, &o.output)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, fmt.Errorf("workflow %s has no task %q: %w", tc.ref.WorkflowID, task, ErrUnknownTask)
	}
	if err != nil {
		return o, ownRecord(fmt.Errorf("error reading the output of task %q: %w", task, err))
	}
	// A task that is not a dependency may still change; remember only a
	// final answer.
	if o.state.finished() {
		if tc.unrelated == nil {
			tc.unrelated = map[string]storedOutput{}
		}
		tc.unrelated[task] = o
	}
	return o, nil
}

// depOutputsSQL reads the outputs of a task's dependencies in one query.
const depOutputsSQL = `
SELECT d.name, d.state, d.output
FROM /*schema*/tributary_workflow_task t
JOIN /*schema*/tributary_workflow_task d ON d.workflow_id = t.workflow_id AND d.name = ANY(t.deps)
WHERE t.workflow_id = $1::uuid AND t.name = $2`

const taskOutputSQL = `
SELECT state, output FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid AND name = $2`
