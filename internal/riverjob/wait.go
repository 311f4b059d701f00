package riverjob

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// wakeSnoozedSQL makes snoozed jobs available now: a job River snoozed is
// scheduled for its wake-up (or, for a snooze shorter than River's
// scheduler interval, available with a scheduled_at still ahead, which
// River's fetch skips until then). A job in any other state (running: its
// snooze is not written yet; finalized) is left alone, so a wake never
// lands on a job before River's executor recorded its snooze, and River's
// own write of that snooze (guarded by state = 'running') never lands on a
// job that was woken and fetched again. scheduled_at is the database's now,
// which River's fetch compares it with.
const wakeSnoozedSQL = `
UPDATE /*schema*/river_job
SET state = 'available', scheduled_at = now()
WHERE id = ANY($1::bigint[])
  AND (state = 'scheduled' OR (state = 'available' AND scheduled_at > now()))
RETURNING id, queue`

// wakeDueSQL is for a timer that fires at the end of a snooze ($2): a job
// still scheduled then is made available, and one already available (a
// short snooze, or one River's scheduler moved ahead of time) is returned
// too, so the caller notifies its queue: River's scheduler does not, and
// the job would wait for the producers' next poll.
const wakeDueSQL = `
UPDATE /*schema*/river_job
SET state = 'available', scheduled_at = least(scheduled_at, now())
WHERE id = ANY($1::bigint[]) AND scheduled_at <= $2 AND state IN ('scheduled', 'available')
RETURNING id, queue`

// WakeSnoozed makes the given snoozed jobs available now and returns the
// ids it woke and their distinct queues (to Wake after the commit). Jobs
// that are not snoozed are left alone.
func WakeSnoozed(ctx context.Context, db DBTX, schema string, ids []int64) (woken []int64, queues []string, err error) {
	return wake(ctx, db, schema, wakeSnoozedSQL, ids)
}

// WakeDue makes the given jobs whose snooze ends at or before due
// available, and returns them (those that were available already
// included) and their queues, to Wake.
func WakeDue(ctx context.Context, db DBTX, schema string, ids []int64, due time.Time) (woken []int64, queues []string, err error) {
	return wake(ctx, db, schema, wakeDueSQL, ids, due)
}

func wake(ctx context.Context, db DBTX, schema, sql string, ids []int64, extra ...any) ([]int64, []string, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	rows, err := db.Query(ctx, q(schema, sql), append([]any{customPlan, ids}, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("error waking %d snoozed jobs: %w", len(ids), err)
	}
	var woken []int64
	var queues []string
	var id int64
	var queue string
	_, err = pgx.ForEachRow(rows, []any{&id, &queue}, func() error {
		woken = append(woken, id)
		queues = append(queues, queue)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error waking %d snoozed jobs: %w", len(ids), err)
	}
	slices.Sort(queues)
	return woken, slices.Compact(queues), nil
}
