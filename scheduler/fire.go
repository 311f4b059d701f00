package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Job metadata keys written on every job a schedule inserts. The pair
// (schedule, fire_at) is unique among jobs (index
// river_job_tributary_schedule_fire).
const (
	MetaSchedule = riverjob.ScheduleKey
	MetaFireAt   = riverjob.FireAtKey
	MetaMissed   = "tributary_missed"   // fire times folded into this job by CatchUpOnce
	MetaFiredBy  = "tributary_fired_by" // the scheduler (or "cli") that inserted it
	MetaTrigger  = "tributary_trigger"  // "manual" for `schedules trigger`
)

// formatFireTime is the fire time as stored in job metadata: UTC, RFC 3339,
// microseconds at most (what Postgres keeps), so the same instant always
// gives the same string.
func formatFireTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
}

// FireTime returns the fire time and schedule name of a job inserted by a
// schedule, from its metadata. ok is false for other jobs. A worker uses it
// as an idempotency key: at-least-once delivery may run the job twice, but
// a fire time is inserted once.
func FireTime(job *rivertype.JobRow) (fireAt time.Time, schedule string, ok bool) {
	var meta map[string]any
	if job == nil || json.Unmarshal(job.Metadata, &meta) != nil {
		return time.Time{}, "", false
	}
	name, _ := meta[MetaSchedule].(string)
	raw, _ := meta[MetaFireAt].(string)
	t, err := time.Parse(time.RFC3339Nano, raw)
	if name == "" || err != nil {
		return time.Time{}, "", false
	}
	return t, name, true
}

// busy reports whether a job in state counts as unfinished for
// OverlapSkip.
func busy(state rivertype.JobState) bool {
	return state != "" && !riverjob.Finalized(state)
}

// jobBusy reports whether job id exists and is unfinished.
func jobBusy(ctx context.Context, tx pgx.Tx, schema string, id *int64) (bool, error) {
	if id == nil {
		return false, nil
	}
	// A job River's retention deleted ("") finished long ago.
	state, err := riverjob.JobState(ctx, tx, schema, *id)
	if err != nil {
		return false, err
	}
	return busy(state), nil
}

// fireJob is one job a fire inserts.
type fireJob struct {
	schedule string
	kind     string
	args     json.RawMessage
	opts     InsertOpts
	fireAt   time.Time
	missed   int64
	firedBy  string
	manual   bool
}

// insertFire inserts the job of one fire time in tx, unless a job for that
// (schedule, fire time) exists already; then it returns that job's id and
// duplicate = true.
func insertFire(ctx context.Context, client *queue.Client, tx pgx.Tx, f fireJob) (id int64, duplicate bool, err error) {
	fireAt := formatFireTime(f.fireAt)
	if id, found, err := riverjob.FireJobID(ctx, tx, client.Schema(), f.schedule, fireAt); err != nil || found {
		return id, found, err
	}
	meta := map[string]any{MetaSchedule: f.schedule, MetaFireAt: fireAt, MetaFiredBy: f.firedBy}
	if f.missed > 0 {
		meta[MetaMissed] = f.missed
	}
	if f.manual {
		meta[MetaTrigger] = "manual"
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return 0, false, fmt.Errorf("error encoding job metadata: %w", err)
	}
	res, err := client.River().InsertTx(ctx, tx, queue.RawArgs{KindName: f.kind, JSON: f.args}, &river.InsertOpts{
		Queue:       f.opts.Queue,
		Priority:    f.opts.Priority,
		MaxAttempts: f.opts.MaxAttempts,
		Tags:        f.opts.Tags,
		Metadata:    metaJSON,
	})
	if err != nil {
		return 0, false, fmt.Errorf("error inserting %s job for schedule %q at %s: %w", f.kind, f.schedule, fireAt, err)
	}
	if res.UniqueSkippedAsDuplicate {
		return res.Job.ID, true, nil
	}
	return res.Job.ID, false, nil
}
