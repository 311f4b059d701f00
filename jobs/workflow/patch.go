package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// patchStepPrefix starts the step name under which Patched records its
// decision; user step names may not start with it.
const patchStepPrefix = "patch:"

// Patched tells a task with steps whether its run takes the code behind a
// change (a step added, removed or changed) or keeps to the code the run
// started on, so a deploy does not replay a run's records against steps
// they were not made by:
//
//	if ok, err := workflow.Patched(ctx, "add-fraud-check"); err != nil {
//		return err
//	} else if ok {
//		if _, err := workflow.Step(ctx, "fraud-check", checkFraud); err != nil {
//			return err
//		}
//	}
//
// It is true for a run that reaches it on code that has it, and false for
// a run that already went past that point on older code. Precisely: false
// when an earlier attempt of the run recorded a step (a Step, StepTx,
// Sleep, AwaitSignal, child workflow or another Patched) that this attempt
// has not reached yet, which only a run that passed the patch's place
// without the patch can have; true otherwise (a new run, or one that had
// not got that far). The first decision is recorded as a step named
// "patch:" + change, so every later attempt of the run gets the same answer
// whatever it has recorded since. Once no run older than the change is in
// flight, the check (and the old branch) can go; keep the change id
// unused afterwards.
//
// It counts as a step against MaxStepsPerTask. The error is the failure to
// read or record the run's steps; a task that returns it runs again
// without spending an attempt when the connection failed.
func Patched(ctx context.Context, change string) (bool, error) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return false, fmt.Errorf("workflow.Patched: %w", err)
	}
	if change == "" {
		return false, errors.New("workflow.Patched: the change id is empty")
	}
	name := patchStepPrefix + change
	tc.mu.Lock()
	rec, err := tc.useStep(ctx, name)
	var patched bool
	if err == nil && rec == nil {
		patched = true
		for n := range tc.dur.steps {
			if !tc.dur.used[n] {
				patched = false // recorded by an attempt that went further
				break
			}
		}
	}
	tc.mu.Unlock()
	if err != nil {
		return false, err
	}
	if rec != nil {
		return decodeStepOutput[bool](name, rec.output)
	}
	out, _ := json.Marshal(patched)
	now := time.Now().UTC()
	var inserted bool
	err = pgx.BeginFunc(ctx, tc.c.pool, func(tx pgx.Tx) error {
		// Without waiting for the WAL flush, as Step: a marker lost in a
		// crash of Postgres loses every later record with it.
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, tc.c.sql.insertStep, customPlan, tc.ref.JobID, name, tc.ref.WorkflowID, tc.ref.Task,
			"step", string(out), nil, true, now).Scan(&inserted)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent attempt of the job (one presumed dead) decided
		// first: its decision holds.
		raw, err := tc.readStepOutput(ctx, tc.c.pool, name)
		if err != nil {
			return false, err
		}
		return decodeStepOutput[bool](name, raw)
	}
	if err != nil {
		return false, ownRecord(fmt.Errorf("error recording patch %q of task %q: %w", change, tc.ref.Task, err))
	}
	tc.rememberStep(name, out)
	return patched, nil
}
