package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// Overlap is what a StartArgs job does while workflows an earlier job of
// its schedule started still run.
type Overlap string

const (
	// OverlapAllow starts the workflow regardless. The default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip starts nothing while one runs.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne starts the workflow queued behind the running one
	// (it runs when that one ends), and starts nothing while one is queued
	// already: at most one run waits.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapCancelPrevious cancels the running ones, then starts the
	// workflow.
	OverlapCancelPrevious Overlap = "cancel_previous"
)

// Attributes a StartArgs job sets on the workflows it starts.
const (
	// AttrSchedule is the schedule (or "job-ID" for a job no schedule
	// inserted).
	AttrSchedule = "tributary.schedule"
	// AttrFireAt is the fire time the workflow is the run of (RFC 3339).
	AttrFireAt = "tributary.fire_at"
)

// StartArgs is a job that starts a workflow registered by name: give it as
// a schedule's Args to start a workflow on a cron spec.
//
//	scheduler.Schedule{Name: "nightly-report", Spec: "0 3 * * *",
//		Args: workflow.StartArgs{Workflow: "report", Input: json.RawMessage(`{"days":1}`), Overlap: workflow.OverlapSkip}}
//
// Each fire time starts at most one workflow, keyed by the schedule and the
// fire time ("schedule:NAME@TIME", the workflow's caller key), so a job run
// twice or a backfill of a range that already ran starts nothing more. The
// workflows carry the attributes AttrSchedule and AttrFireAt. The fire
// times of a backfill (scheduler.Backfill) start whatever the policy. The job's
// output (river.RecordOutput) says what it did: a StartResult.
type StartArgs struct {
	// Workflow is the registered name (Registry.Register).
	Workflow string `json:"workflow"`
	// Input is the builder's JSON input.
	Input json.RawMessage `json:"input,omitempty"`
	// Overlap is what to do while the schedule's earlier workflows run.
	//
	// Defaults to OverlapAllow.
	Overlap Overlap `json:"overlap,omitempty"`
}

// Kind implements river.JobArgs.
func (StartArgs) Kind() string { return "tributary.workflow.start" }

// StartResult is what a StartArgs job did, recorded as its output.
type StartResult struct {
	// Started is the workflow it started (or found started by an earlier
	// run of the job); empty when it skipped.
	Started string `json:"started,omitempty"`
	// Skipped says why nothing started.
	Skipped string `json:"skipped,omitempty"`
	// Cancelled are the running workflows OverlapCancelPrevious cancelled.
	Cancelled []string `json:"cancelled,omitempty"`
}

// AddStartWorker registers the worker of StartArgs jobs on rt, starting the
// workflows reg builds. The front door (tributary.Config.Workflows) does it
// for every App with a registry.
func AddStartWorker(rt *queue.Runtime, reg *Registry) {
	queue.AddWorker(rt, &startWorker{c: NewClient(rt.Client), reg: reg})
}

type startWorker struct {
	river.WorkerDefaults[StartArgs]
	c   *Client
	reg *Registry
}

func (w *startWorker) Work(ctx context.Context, job *river.Job[StartArgs]) error {
	res, queues, err := w.c.startScheduled(ctx, w.reg, job)
	if err != nil {
		var input *InputError
		var unknown *UnknownWorkflowError
		var invalid *ValidationError
		if errors.As(err, &input) || errors.As(err, &unknown) || errors.As(err, &invalid) {
			return river.JobCancel(err) // the same args fail every time
		}
		return err
	}
	if err := riverjob.Wake(ctx, w.c.qc.Pool(), w.c.schema, queues); err != nil {
		w.c.logger.WarnContext(ctx, "error waking River after a scheduled start", "error", err)
	}
	return river.RecordOutput(ctx, res)
}

// scheduleOf returns the schedule and fire time a job was inserted for, or
// the job's own id and creation time for one inserted otherwise, and
// whether a backfill inserted it.
func scheduleOf(job *river.Job[StartArgs]) (schedule, fireAt string, backfill bool) {
	var meta map[string]any
	_ = json.Unmarshal(job.Metadata, &meta)
	schedule, _ = meta[scheduler.MetaSchedule].(string)
	fireAt, _ = meta[scheduler.MetaFireAt].(string)
	firedBy, _ := meta[scheduler.MetaFiredBy].(string)
	if schedule == "" || fireAt == "" {
		return fmt.Sprintf("job-%d", job.ID), job.CreatedAt.UTC().Format(time.RFC3339Nano), false
	}
	return schedule, fireAt, firedBy == scheduler.FiredByBackfill
}

// startScheduledLockSQL serialises the starts of one schedule, so two of
// its jobs worked at once see each other's workflows.
const startScheduledLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('tributary.workflow.start:' || $1 || ':' || $2, 0))`

// scheduledRunningSQL lists the schedule's running workflows and whether
// each waits queued for its concurrency slot.
const scheduledRunningSQL = `
SELECT w.id::text, w.queued FROM /*schema*/tributary_workflow_attribute a
JOIN /*schema*/tributary_workflow w ON w.id = a.workflow_id
WHERE a.key = '` + AttrSchedule + `' AND a.value = $1 AND w.status = 'running'
ORDER BY w.id`

func (c *Client) startScheduled(ctx context.Context, reg *Registry, job *river.Job[StartArgs]) (*StartResult, []string, error) {
	a := job.Args
	schedule, fireAt, backfill := scheduleOf(job)
	key := "schedule:" + schedule + "@" + fireAt
	opts := &Opts{ID: key, OnConflict: ConflictReturnExisting, Attributes: map[string]string{AttrSchedule: schedule, AttrFireAt: fireAt}}
	overlap := a.Overlap
	if backfill {
		overlap = OverlapAllow // a backfill asks for every run of its range
	}
	switch overlap {
	case "":
		overlap = OverlapAllow
	case OverlapAllow, OverlapSkip, OverlapCancelPrevious:
	case OverlapBufferOne:
		opts.ConcurrencyKey, opts.ConcurrencyLimit = "schedule:"+schedule, 1
	default:
		return nil, nil, &InputError{Workflow: a.Workflow, Err: fmt.Errorf("invalid overlap %q: want %q, %q, %q or %q", overlap,
			OverlapAllow, OverlapSkip, OverlapBufferOne, OverlapCancelPrevious)}
	}
	wf, err := reg.Build(a.Workflow, a.Input, opts)
	if err != nil {
		return nil, nil, err
	}
	res := &StartResult{}
	var queues []string
	err = pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, startScheduledLockSQL, customPlan, c.schema, schedule); err != nil {
			return fmt.Errorf("error locking the starts of schedule %q: %w", schedule, err)
		}
		var existing string
		err := tx.QueryRow(ctx, c.sql.selectByKey, customPlan, key).Scan(&existing, new(string), new(Status), new(time.Time))
		if err == nil {
			res.Started = existing // a run of this job started it
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("error reading workflow %q: %w", key, err)
		}
		rows, err := tx.Query(ctx, queue.Qualify(c.schema, scheduledRunningSQL), customPlan, schedule)
		if err != nil {
			return fmt.Errorf("error reading the running workflows of schedule %q: %w", schedule, err)
		}
		var running []string
		queued := false
		var id string
		var q bool
		if _, err := pgx.ForEachRow(rows, []any{&id, &q}, func() error {
			running = append(running, id)
			queued = queued || q
			return nil
		}); err != nil {
			return fmt.Errorf("error reading the running workflows of schedule %q: %w", schedule, err)
		}
		switch {
		case overlap == OverlapSkip && len(running) > 0:
			res.Skipped = fmt.Sprintf("workflow %s of the schedule runs", running[0])
			return nil
		case overlap == OverlapBufferOne && queued:
			res.Skipped = "a workflow of the schedule waits already"
			return nil
		case overlap == OverlapCancelPrevious:
			for _, id := range running {
				cr, q, err := c.cancelTx(ctx, tx, id, false)
				if err != nil {
					return fmt.Errorf("error cancelling workflow %s of schedule %q: %w", id, schedule, err)
				}
				queues = append(queues, q...)
				if cr.Cancelled > 0 { // else it ended meanwhile
					res.Cancelled = append(res.Cancelled, id)
				}
			}
		}
		ins, err := c.InsertTx(ctx, tx, wf)
		if err != nil {
			return err
		}
		res.Started = ins.ID
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	c.logger.InfoContext(ctx, "scheduled workflow start", "schedule", schedule, "fire_at", fireAt, "workflow", a.Workflow,
		"started", res.Started, "skipped", res.Skipped, "cancelled", len(res.Cancelled))
	return res, queues, nil
}
