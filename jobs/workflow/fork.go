package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Origin is the workflow and task a fork started from.
type Origin struct {
	WorkflowID string `json:"workflow_id"`
	Task       string `json:"task"`
}

// forkPlan is what Fork copies: the tasks that keep their records, by name.
type forkPlan struct {
	from, task string
	keep       map[string]*taskRecord
	queues     []string // of jobs released when the insert decided conditions
}

// copies reports whether the fork copies task name; false without a fork.
func (f *forkPlan) copies(name string) bool { return f.copied(name) != nil }

func (f *forkPlan) copied(name string) *taskRecord {
	if f == nil {
		return nil
	}
	return f.keep[name]
}

// Fork starts a new workflow with the graph of the workflow ref names,
// running again from task fromTask: fromTask and every task after it run
// again, and so does every other task that did not complete (or was not
// skipped); the others are copied with their records (outputs, attempts,
// errors) as they ended, without running. The new workflow has the
// original's name, input and attributes, no caller key and no concurrency
// key, and names its origin (Details.Origin). The original is left as it
// is. An unknown task is ErrUnknownTask; a task that is still active in
// the original (it would run twice at once) is ErrTaskActive.
//
//	res, err := wfc.Fork(ctx, "order-42", "charge") // after fixing charge's bug
func (c *Client) Fork(ctx context.Context, ref, fromTask string) (*InsertResult, error) {
	var res *InsertResult
	var queues []string
	err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		id, err := c.resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		var name string
		var input, attrs []byte
		if err := tx.QueryRow(ctx, queue.Qualify(c.schema, forkSourceSQL), customPlan, id).Scan(&name, &input, &attrs); err != nil {
			return fmt.Errorf("error reading workflow %s: %w", id, err)
		}
		recs, err := c.readTaskRecords(ctx, tx, id)
		if err != nil {
			return err
		}
		plan, err := planFork(recs, id, fromTask)
		if err != nil {
			return fmt.Errorf("cannot fork workflow %s: %w", id, err)
		}
		wf := New(name, nil)
		if len(input) > 0 {
			wf.input = input
		}
		if wf.opts.Attributes, err = decodeAttributes(attrs); err != nil {
			return err
		}
		for _, r := range recs {
			opts := &TaskOpts{Deps: r.Deps, OnDepFailure: r.OnDepFailure, RunIf: r.RunIf}
			// The recorded metadata is what the task's jobs were given,
			// the workflow's own keys set apart: InsertOpts carries it.
			opts.InsertOpts = recordedInsertOpts(r)
			wf.Add(r.Name, riverjob.RawArgs(r.Kind, r.Args), opts)
		}
		if _, err := wf.validate(); err != nil {
			return err
		}
		res, err = c.insertWith(ctx, tx, wf, plan)
		if err != nil {
			return err
		}
		queues = plan.queues
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := riverjob.Wake(ctx, c.qc.Pool(), c.schema, queues); err != nil {
		c.logger.WarnContext(ctx, "error waking River for a fork", "error", err)
	}
	c.logger.InfoContext(ctx, "workflow forked", "workflow_id", res.ID, "from", ref, "task", fromTask, "tasks", len(res.Jobs))
	return res, nil
}

// planFork returns what a fork from task copies: every task that is not
// task or after it and that completed or was skipped, unless a task it
// depends on runs again.
func planFork(recs []taskRecord, from, task string) (*forkPlan, error) {
	byName := make(map[string]*taskRecord, len(recs))
	for i := range recs {
		byName[recs[i].Name] = &recs[i]
	}
	if byName[task] == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownTask, task)
	}
	again := map[string]bool{}
	var queue []string
	mark := func(name string) {
		if !again[name] {
			again[name] = true
			queue = append(queue, name)
		}
	}
	mark(task)
	for _, r := range recs {
		if r.State != TaskCompleted && r.State != TaskSkipped {
			mark(r.Name)
		}
	}
	for len(queue) > 0 {
		t := byName[queue[0]]
		queue = queue[1:]
		for _, d := range t.Dependents {
			mark(d)
		}
	}
	plan := &forkPlan{from: from, task: task, keep: map[string]*taskRecord{}}
	for name, r := range byName {
		if !again[name] {
			plan.keep[name] = r
		}
	}
	for name := range again {
		if byName[name].State == TaskActive {
			return nil, fmt.Errorf("task %q is active (job %d): %w", name, byName[name].JobID, ErrTaskActive)
		}
	}
	return plan, nil
}

// recordedInsertOpts are the River options a task's jobs were inserted
// with, from its record.
func recordedInsertOpts(r taskRecord) *river.InsertOpts {
	opts := &river.InsertOpts{Queue: r.Queue, Priority: r.Priority, MaxAttempts: r.MaxAttempts, Tags: ownTags(r.Tags)}
	if meta := ownMetadata(r.metadata); len(meta) > 0 {
		opts.Metadata = meta
	}
	return opts
}

// forkSourceSQL reads what a fork keeps of the workflow.
const forkSourceSQL = `
SELECT w.name, w.input, ` + selectAttributesSQL + ` FROM /*schema*/tributary_workflow w WHERE w.id = $1::uuid`

// copyTasksSQL gives the copied tasks of a fork their records.
const copyTasksSQL = `
UPDATE /*schema*/tributary_workflow_task t
SET output = s.output, run = s.run, attempts = s.attempts, errors = s.errors, started_at = s.started_at,
    finished_at = s.finished_at, ready_at = s.ready_at, updated_at = $3
FROM /*schema*/tributary_workflow_task s
WHERE t.workflow_id = $1::uuid AND s.workflow_id = $2::uuid AND s.name = t.name AND t.name = ANY($4::text[])`

const setOriginSQL = `
UPDATE /*schema*/tributary_workflow SET forked_from = $2::uuid, forked_from_task = $3 WHERE id = $1::uuid`

// finishFork completes a fork's insert: the copied tasks get their records,
// the workflow its origin and its counts, and conditions whose tasks were
// all copied are decided.
func (c *Client) finishFork(ctx context.Context, tx pgx.Tx, id string, wf *Workflow, plan *forkPlan, now time.Time) error {
	names := make([]string, 0, len(plan.keep))
	for name := range plan.keep {
		names = append(names, name)
	}
	if _, err := tx.Exec(ctx, queue.Qualify(c.schema, copyTasksSQL), customPlan, id, plan.from, now, names); err != nil {
		return fmt.Errorf("error copying the tasks of workflow %s: %w", plan.from, err)
	}
	if _, err := tx.Exec(ctx, queue.Qualify(c.schema, setOriginSQL), customPlan, id, plan.from, plan.task); err != nil {
		return fmt.Errorf("error recording the origin of workflow %s: %w", id, err)
	}
	if err := c.recount(ctx, tx, id, StatusRunning, now); err != nil {
		return err
	}
	var undecided []string
	for _, t := range wf.tasks {
		if plan.copies(t.name) || t.opts.RunIf == nil {
			continue
		}
		waiting := false
		for _, d := range t.deps {
			waiting = waiting || !plan.copies(d)
		}
		if !waiting {
			undecided = append(undecided, t.name)
		}
	}
	if len(undecided) == 0 {
		return nil
	}
	a := newAdvance(tx, &c.sql, c.schema, now)
	if err := a.decideUndecided(ctx, id, undecided); err != nil {
		return err
	}
	q, err := a.flush(ctx)
	plan.queues = q
	return err
}

// ownMetadata is a task's recorded metadata without the keys the workflow
// writes (the task's name and workflow).
func ownMetadata(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) == 0 {
		return nil
	}
	delete(m, metaWorkflow)
	delete(m, metaTask)
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}
