package riverjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Metadata keys of a limited job (package limits, docs/decisions/0030-flow-control.md):
// the limit's name and the job's partition value. Migration 0023's index
// and triggers name them too.
const (
	LimitMetaName = "tributary_limit"
	LimitMetaKey  = "tributary_limit_key"
)

// LimitKeyUse is one partition key of a limit as admission sees it: its
// jobs in available or running (Used), its pending jobs that are due
// (Waiting), and when the oldest of those was scheduled.
type LimitKeyUse struct {
	Key           string
	Used, Waiting int
	OldestWaiting *time.Time
}

// LimitUse counts, per partition key of limit, the jobs holding a slot
// (available, running) and the due pending ones, in key order, through
// migration 0023's partial index. Keys with neither are left out.
func LimitUse(ctx context.Context, db DBTX, schema, limit string) ([]LimitKeyUse, error) {
	rows, err := db.Query(ctx, q(schema, limitUseSQL), customPlan, limit)
	if err != nil {
		return nil, fmt.Errorf("error counting the jobs of limit %q: %w", limit, err)
	}
	use, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LimitKeyUse, error) {
		var u LimitKeyUse
		err := r.Scan(&u.Key, &u.Used, &u.Waiting, &u.OldestWaiting)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("error counting the jobs of limit %q: %w", limit, err)
	}
	return use, nil
}

// AdmitLimited moves up to counts[i] due pending jobs of limit and keys[i]
// to available, each key's first by River's fetch order (priority,
// scheduled time, id), and returns the queues of the jobs it moved. It sets
// tributary.admitting for the rest of tx, which lets the moves pass
// migration 0023's door; run it in the transaction that holds the limit's
// lock and counted its use.
func AdmitLimited(ctx context.Context, tx pgx.Tx, schema, limit string, keys []string, counts []int32) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, admittingSQL); err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	rows, err := tx.Query(ctx, q(schema, admitLimitedSQL), customPlan, limit, keys, counts)
	if err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	return queues, nil
}

// limitUseSQL: one range scan of the partial index per limit. A pending
// job scheduled in the future is not waiting yet (its retry, or its
// ScheduledAt, is not due).
const limitUseSQL = `
SELECT metadata ->> 'tributary_limit_key' AS key,
       count(*) FILTER (WHERE state IN ('available', 'running'))::int AS used,
       count(*) FILTER (WHERE state = 'pending' AND scheduled_at <= now())::int AS waiting,
       min(scheduled_at) FILTER (WHERE state = 'pending' AND scheduled_at <= now()) AS oldest
FROM /*schema*/river_job
WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1
  AND state IN ('pending', 'available', 'running')
GROUP BY 1
ORDER BY 1`

const admittingSQL = `SELECT set_config('tributary.admitting', 'on', true)`

// admitLimitedSQL: the choice is a MATERIALIZED CTE, taken once; as a
// subquery of the UPDATE's join Postgres may run it again for every row of
// the outer side, each run choosing (and admitting) further jobs. River
// sets nothing else when it makes a job available (its scheduler only
// changes state), so neither does this.
const admitLimitedSQL = `
WITH chosen AS MATERIALIZED (
    SELECT p.id
    FROM unnest($2::text[], $3::int[]) AS k(key, n),
    LATERAL (
        SELECT id FROM /*schema*/river_job
        WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1
          AND metadata ->> 'tributary_limit_key' = k.key
          AND state = 'pending' AND scheduled_at <= now()
        ORDER BY priority, scheduled_at, id
        LIMIT k.n
        FOR UPDATE SKIP LOCKED
    ) p
)
UPDATE /*schema*/river_job j SET state = 'available'
FROM chosen
WHERE j.id = chosen.id AND j.state = 'pending'
RETURNING j.queue`

// LimitOldestWaiting returns the pending job of limit scheduled first (its
// id and scheduled time), nil when none waits.
func LimitOldestWaiting(ctx context.Context, db DBTX, schema, limit string) (id *int64, scheduledAt *time.Time, err error) {
	err = db.QueryRow(ctx, q(schema, limitOldestWaitingSQL), customPlan, limit).Scan(&id, &scheduledAt)
	if err == pgx.ErrNoRows {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("error finding the oldest waiting job of limit %q: %w", limit, err)
	}
	return id, scheduledAt, nil
}

const limitOldestWaitingSQL = `
SELECT id, scheduled_at FROM /*schema*/river_job
WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1 AND state = 'pending'
ORDER BY scheduled_at, id
LIMIT 1`
