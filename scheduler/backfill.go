package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// FiredByBackfill is the MetaFiredBy of the jobs Backfill inserts.
const FiredByBackfill = "backfill"

// BackfillMax is the most fire times one Backfill inserts: a longer range
// is refused, so a typo in a date cannot flood the queues. Backfill it in
// parts.
const BackfillMax = 1000

// ErrBackfillTooLong is the kind of the error of a range with more than
// BackfillMax fire times.
var ErrBackfillTooLong = errors.New("backfill range too long")

// BackfillResult is what Backfill did.
type BackfillResult struct {
	Schedule string    `json:"schedule"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	// Inserted counts the fire times it inserted a job for.
	Inserted int `json:"inserted"`
	// Existing counts the fire times that had a job already (fired, or
	// backfilled before), which it left alone.
	Existing int `json:"existing"`
	// JobIDs are the inserted jobs.
	JobIDs []int64 `json:"job_ids,omitempty"`
}

// Backfill inserts the jobs the schedule's spec would have fired at every
// fire time t with from <= t < to, as the schedule inserts them (kind,
// args and options from the table; the fire time in the job's metadata),
// in one transaction. A fire time that has a job already is left alone,
// so a second backfill of a range inserts nothing (while River keeps those
// jobs: its retention deletes finished ones after a day by default). The
// overlap policy does not apply: a backfill asks for every run of the
// range. It works on paused schedules, refuses orphaned ones (ErrOrphaned)
// and ranges of more than BackfillMax fire times (ErrBackfillTooLong).
func Backfill(ctx context.Context, client *queue.Client, name string, from, to time.Time) (*BackfillResult, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("invalid backfill range: from %s is not before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	res := &BackfillResult{Schedule: name, From: from, To: to}
	err := pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		l, err := lockSchedule(ctx, tx, client.Schema(), name)
		if err != nil {
			return err
		}
		if l.orphanedAt != nil {
			return fmt.Errorf("%w (since %s): %q", ErrOrphaned, l.orphanedAt.UTC().Format(time.RFC3339), name)
		}
		spec, err := ParseSpec(l.spec, l.timezone)
		if err != nil {
			return fmt.Errorf("error reading the spec of schedule %q: %w", name, err)
		}
		var times []time.Time
		for t := spec.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = spec.Next(t) {
			if len(times) == BackfillMax {
				return fmt.Errorf("%w: schedule %q fires more than %d times from %s to %s", ErrBackfillTooLong, name, BackfillMax,
					from.Format(time.RFC3339), to.Format(time.RFC3339))
			}
			times = append(times, t)
		}
		for _, t := range times {
			id, dup, err := insertFire(ctx, client, tx, fireJob{schedule: name, kind: l.kind, args: l.args, opts: l.opts, fireAt: t, firedBy: FiredByBackfill})
			if err != nil {
				return err
			}
			if dup {
				res.Existing++
				continue
			}
			res.Inserted++
			res.JobIDs = append(res.JobIDs, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
