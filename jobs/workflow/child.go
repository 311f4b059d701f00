package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// childSignalPrefix starts the name of the signal a child workflow's end
// sends to its parent ("child:" and the child's id).
const childSignalPrefix = "child:"

// ErrChildFailed is the kind of *ChildFailedError.
var ErrChildFailed = errors.New("child workflow did not complete")

// ChildFailedError is a child workflow that ended failed or cancelled.
type ChildFailedError struct {
	ID     string
	Status Status
}

func (e *ChildFailedError) Error() string {
	return fmt.Sprintf("child workflow %s ended %s", e.ID, e.Status)
}

// Unwrap returns ErrChildFailed.
func (e *ChildFailedError) Unwrap() error { return ErrChildFailed }

// ChildResult is how a child workflow ended.
type ChildResult struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
}

// RunChild starts wf as a child of the running task's workflow and waits
// for it like a dependency: the start is a step (name, unique in the run;
// the child is inserted in the step's transaction, so once per run), and
// the wait holds no worker slot (AwaitSignal on the signal "child:" + the
// child's id, which the child's end sends in the transaction that finishes
// it). It returns when the child finished: completed is a nil error,
// failed or cancelled a *ChildFailedError (errors.Is ErrChildFailed) with
// the result. Until then it returns a *WaitError, which Work returns.
// Cancelling the parent workflow cancels its running children (and
// theirs).
//
//	res, err := workflow.RunChild(ctx, "ship", shipWorkflow(order))
//	if err != nil {
//		return err
//	}
func RunChild(ctx context.Context, name string, wf *Workflow) (*ChildResult, error) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return nil, fmt.Errorf("workflow.RunChild: %w", err)
	}
	if err := checkName("child name", name); err != nil {
		return nil, err
	}
	childID, err := StepTx(ctx, childSignalPrefix+name, func(ctx context.Context, tx pgx.Tx) (string, error) {
		rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return "", fmt.Errorf("workflow.RunChild: %w", err)
		}
		cl := &Client{schema: tc.c.cfg.Schema, logger: tc.c.logger, sql: tc.c.sql, rc: rc}
		res, err := cl.InsertTx(ctx, tx, wf)
		if err != nil {
			return "", ownRecord(err) // the child's insert is tributary's write
		}
		if res.Existing {
			return "", fmt.Errorf("child workflow %q: key %q is taken by workflow %s, which is not this task's child", name, res.Key, res.ID)
		}
		if _, err := tx.Exec(ctx, tc.c.sql.setParent, customPlan, res.ID, tc.ref.WorkflowID, tc.ref.Task); err != nil {
			return "", ownRecord(fmt.Errorf("error linking child workflow %s: %w", res.ID, err))
		}
		return res.ID, nil
	})
	if err != nil {
		return nil, err
	}
	res, err := AwaitSignal[ChildResult](ctx, childSignalPrefix+childID, 0)
	if err != nil {
		return nil, err
	}
	if res.Status != StatusCompleted {
		return &res, &ChildFailedError{ID: res.ID, Status: res.Status}
	}
	return &res, nil
}

// notifyParents sends each finished child's end to its parent, in the
// transaction that finished it, and returns the queues of the parents'
// tasks it woke.
func notifyParents(ctx context.Context, tx pgx.Tx, sql *statements, schema string, ended []childEnd, now time.Time) ([]string, error) {
	var queues []string
	for _, e := range ended {
		payload, err := json.Marshal(ChildResult{ID: e.id, Status: e.status})
		if err != nil {
			return nil, err
		}
		name := childSignalPrefix + e.id
		_, q, err := sendSignal(ctx, tx, sql, schema, e.parent, name, payload, name, now)
		if err != nil {
			return nil, err
		}
		queues = append(queues, q...)
	}
	return queues, nil
}

// childEnd is a child workflow that finished.
type childEnd struct {
	id, parent string
	status     Status
}

const setParentSQL = `
UPDATE /*schema*/tributary_workflow SET parent_workflow_id = $2::uuid, parent_task = $3 WHERE id = $1::uuid`

const runningChildrenSQL = `
SELECT id::text FROM /*schema*/tributary_workflow WHERE parent_workflow_id = $1::uuid AND status = 'running' ORDER BY id`

const parentOfSQL = `
SELECT coalesce(parent_workflow_id::text, '') FROM /*schema*/tributary_workflow WHERE id = $1::uuid`
