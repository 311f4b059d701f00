package riverjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Metadata keys of a limited job (package limits, docs/decisions/0030-flow-control.md):
// the limit's name and the job's partition value. Migration 0027's index
// and triggers name them too.
//
// A job its inserter makes pending itself (a workflow task waiting for its
// dependencies) carries its limit's name as LimitMetaOnRelease instead,
// which admission does not see; migration 0028's door renames it to
// LimitMetaName when the job is released into available, and the job then
// waits for admission. LimitMetaAsk is what an inserter writes to choose
// a job's limit or key itself (LimitAsk; a workflow task's
// TaskOpts.Limit and LimitKey); the insert middleware reads it.
// LimitMetaAdmit is the insert middleware's request to admit an available
// job at insert, which migration 0031's trigger grants or turns into a
// wait (pending), and takes off the job.
const (
	LimitMetaName      = "tributary_limit"
	LimitMetaKey       = "tributary_limit_key"    // absent: the empty key (migration 0034)
	LimitMetaWeight    = "tributary_limit_weight" // every job of a rate limit carries it (migration 0033)
	LimitMetaOnRelease = "tributary_limit_on_release"
	LimitMetaAsk       = "tributary_limit_ask"
	LimitMetaAdmit     = "tributary_limit_admit"
)

// LimitAsk is the value of LimitMetaAsk: the limit to govern the job (by
// name, whatever its kind and queue; empty: the first that matches them)
// and its partition key (empty: the limit's KeyArg or the args' Keyer).
type LimitAsk struct {
	Limit string `json:"limit,omitempty"`
	Key   string `json:"key,omitempty"`
}

type shortInsertKey struct{}

// WithShortInsert marks the context of an insert that River makes in a
// transaction of its own (queue.Client's Enqueue and EnqueueMany): the
// transaction ends with the insert, so the limits' middleware may ask
// migration 0031's trigger to admit a limited job at insert, which holds
// its limit's row until the commit. An insert in a caller's transaction,
// which may stay open for as long as the caller likes, is not marked: its
// limited jobs wait for the admitter, and nothing is held.
func WithShortInsert(ctx context.Context) context.Context {
	return context.WithValue(ctx, shortInsertKey{}, true)
}

// ShortInsert reports whether WithShortInsert marked ctx.
func ShortInsert(ctx context.Context) bool {
	v, _ := ctx.Value(shortInsertKey{}).(bool)
	return v
}

type ownCompletionKey struct{}

// WithOwnCompletion marks the context of a job whose completion a
// middleware outside the limits' writes in a transaction of its own (a
// workflow task's, with the task's outcome): the limits' middleware then
// leaves its completion alone, since a job completed before that
// transaction looks like an attempt handed on, and its outcome would be
// dropped.
func WithOwnCompletion(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownCompletionKey{}, true)
}

// OwnCompletion reports whether WithOwnCompletion marked ctx.
func OwnCompletion(ctx context.Context) bool {
	v, _ := ctx.Value(ownCompletionKey{}).(bool)
	return v
}

// LimitKeyUse is one partition key of a limit as admission sees it: its
// jobs in available or running (Used), its pending jobs that are due
// (Waiting), and when the oldest of those was scheduled. For a rate limit
// (a period given), Started is the weight of the key's starts within the
// period, counted as LimitUse says, and RateFreesIn how long until the
// oldest of them leaves the period (nil: none counted).
type LimitKeyUse struct {
	Key           string
	Used, Waiting int
	OldestWaiting *time.Time
	Started       int64
	RateFreesIn   *time.Duration
}

// LimitUse counts, per partition key of limit with a job holding a slot or
// waiting, in key order, the jobs holding a slot (available, running) and
// the due pending ones, through migration 0027's partial index. With
// period > 0 it also counts the key's starts within the period, by weight:
// each job whose latest attempt started within it, once, plus once per
// earlier attempt whose error (River records one per failed attempt) falls
// within it, plus every available job (admitted, about to start); the
// starts through migration 0033's index, which holds the jobs carrying a
// weight (every job of a rate limit does). A start is thus never missed, though a failed attempt that began before the
// period and ended within it counts too; what is not seen is a start
// followed by a snooze and a second start (a snooze records no error).
func LimitUse(ctx context.Context, db DBTX, schema, limit string, period time.Duration) ([]LimitKeyUse, error) {
	rows, err := db.Query(ctx, q(schema, limitUseSQL), customPlan, limit, period.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("error counting the jobs of limit %q: %w", limit, err)
	}
	use, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LimitKeyUse, error) {
		var u LimitKeyUse
		var freesIn *float64
		err := r.Scan(&u.Key, &u.Used, &u.Waiting, &u.OldestWaiting, &u.Started, &freesIn)
		if freesIn != nil {
			d := max(time.Duration(*freesIn*float64(time.Second)), 0)
			u.RateFreesIn = &d
		}
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("error counting the jobs of limit %q: %w", limit, err)
	}
	return use, nil
}

// AdmitLimited moves up to counts[i] due pending jobs of limit and keys[i]
// to available, each key's first by River's fetch order (priority,
// scheduled time, id) while their weights add up to at most weights[i],
// and returns the queues of the jobs it moved. It sets
// tributary.admitting for the rest of tx, which lets the moves pass
// migration 0027's door; run it in the transaction that holds the limit's
// lock and counted its use.
func AdmitLimited(ctx context.Context, tx pgx.Tx, schema, limit string, keys []string, counts []int32, weights []int64) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, admittingSQL); err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	rows, err := tx.Query(ctx, q(schema, admitLimitedSQL), customPlan, limit, keys, counts, weights)
	if err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error admitting jobs of limit %q: %w", limit, err)
	}
	return queues, nil
}

// limitUseSQL: one range scan of each partial index per limit. A pending
// job scheduled in the future is not waiting yet (its retry, or its
// ScheduledAt, is not due).
const limitUseSQL = `
WITH slots AS (
    SELECT coalesce(metadata ->> 'tributary_limit_key', '') AS key,
           count(*) FILTER (WHERE state IN ('available', 'running'))::int AS used,
           count(*) FILTER (WHERE state = 'pending' AND scheduled_at <= now())::int AS waiting,
           min(scheduled_at) FILTER (WHERE state = 'pending' AND scheduled_at <= now()) AS oldest,
           coalesce(sum(coalesce((metadata ->> 'tributary_limit_weight')::bigint, 1)) FILTER (WHERE state = 'available'), 0)::bigint AS admitted
    FROM /*schema*/river_job
    WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1
      AND state IN ('pending', 'available', 'running')
    GROUP BY 1
),
starts AS (
    SELECT coalesce(metadata ->> 'tributary_limit_key', '') AS key,
           sum(coalesce((metadata ->> 'tributary_limit_weight')::bigint, 1) * (1 + (
               SELECT count(*) FROM unnest(errors) AS e
               WHERE (e ->> 'at')::timestamptz > now() - $2::bigint * interval '1 millisecond'
                 AND (e ->> 'attempt')::int < attempt)))::bigint AS started,
           min(attempted_at) AS first
    FROM /*schema*/river_job
    WHERE $2::bigint > 0 AND metadata ? 'tributary_limit_weight' AND metadata ->> 'tributary_limit' = $1
      AND attempted_at IS NOT NULL AND attempted_at > now() - $2::bigint * interval '1 millisecond'
    GROUP BY 1
)
SELECT s.key, s.used, s.waiting, s.oldest,
       CASE WHEN $2::bigint > 0 THEN s.admitted + coalesce(r.started, 0) ELSE 0 END::bigint,
       extract(epoch FROM r.first + $2::bigint * interval '1 millisecond' - now())::float8
FROM slots s LEFT JOIN starts r ON r.key = s.key
ORDER BY 1`

const admittingSQL = `SELECT set_config('tributary.admitting', 'on', true)`

// admitLimitedSQL: the choice is a MATERIALIZED CTE, taken once; as a
// subquery of the UPDATE's join Postgres may run it again for every row of
// the outer side, each run choosing (and admitting) further jobs. River
// sets nothing else when it makes a job available (its scheduler only
// changes state), so neither does this.
const admitLimitedSQL = `
WITH chosen AS MATERIALIZED (
    SELECT c.id
    FROM unnest($2::text[], $3::int[], $4::bigint[]) AS k(key, n, budget),
    LATERAL (
        SELECT cand.id, sum(cand.weight) OVER (ORDER BY cand.priority, cand.scheduled_at, cand.id) AS cum
        FROM (
            SELECT id, priority, scheduled_at, coalesce((metadata ->> 'tributary_limit_weight')::bigint, 1) AS weight
            FROM /*schema*/river_job
            WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1
              AND coalesce(metadata ->> 'tributary_limit_key', '') = k.key
              AND state = 'pending' AND scheduled_at <= now()
            ORDER BY priority, scheduled_at, id
            LIMIT k.n
            FOR UPDATE SKIP LOCKED
        ) cand
    ) c
    WHERE c.cum <= k.budget
)
UPDATE /*schema*/river_job j SET state = 'available'
FROM chosen
WHERE j.id = chosen.id AND j.state = 'pending'
RETURNING j.queue`

// LimitWaiting reports whether limit has a due pending job: whether a
// pass over it could admit anything. One probe of migration 0027's partial
// index, without counting the jobs that hold slots.
func LimitWaiting(ctx context.Context, db DBTX, schema, limit string) (bool, error) {
	var waiting bool
	if err := db.QueryRow(ctx, q(schema, limitWaitingSQL), customPlan, limit).Scan(&waiting); err != nil {
		return false, fmt.Errorf("error looking for waiting jobs of limit %q: %w", limit, err)
	}
	return waiting, nil
}

const limitWaitingSQL = `
SELECT EXISTS (
    SELECT 1 FROM /*schema*/river_job
    WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1
      AND state = 'pending' AND scheduled_at <= now())`

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

// LimitCancelCandidates returns the ids of key's jobs under limit that a
// busy-key strategy cancels: its due pending jobs but the newest
// keepWaiting (by id), and, with holding, its available and running jobs
// whose cancellation nobody asked for yet.
func LimitCancelCandidates(ctx context.Context, db DBTX, schema, limit, key string, keepWaiting int, holding bool) ([]int64, error) {
	rows, err := db.Query(ctx, q(schema, limitCancelCandidatesSQL), customPlan, limit, key, keepWaiting, holding)
	if err != nil {
		return nil, fmt.Errorf("error finding the jobs of limit %q key %q to cancel: %w", limit, key, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error finding the jobs of limit %q key %q to cancel: %w", limit, key, err)
	}
	return ids, nil
}

const limitCancelCandidatesSQL = `
(SELECT id FROM /*schema*/river_job
 WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1 AND coalesce(metadata ->> 'tributary_limit_key', '') = $2
   AND state = 'pending' AND scheduled_at <= now()
 ORDER BY id DESC OFFSET $3)
UNION ALL
(SELECT id FROM /*schema*/river_job
 WHERE $4 AND metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1 AND coalesce(metadata ->> 'tributary_limit_key', '') = $2
   AND state IN ('available', 'running') AND NOT metadata ? 'cancel_attempted_at')`

// StartSpread describes when a schema's jobs started (by the start of
// their latest attempt): the first and last start, and the most starts any
// window of one second beginning at a start held. For benchmarks of rate
// limits.
type StartSpread struct {
	First, Last time.Time
	Busiest     int
}

// JobStartSpread reads the StartSpread of every started job in schema.
func JobStartSpread(ctx context.Context, db DBTX, schema string) (StartSpread, error) {
	var s StartSpread
	err := db.QueryRow(ctx, q(schema, jobStartSpreadSQL)).Scan(&s.First, &s.Last, &s.Busiest)
	if err != nil {
		return s, fmt.Errorf("error reading the jobs' starts: %w", err)
	}
	return s, nil
}

const jobStartSpreadSQL = `
SELECT min(attempted_at), max(attempted_at),
       coalesce((SELECT max(c) FROM (
           SELECT count(*) OVER (ORDER BY attempted_at RANGE BETWEEN CURRENT ROW AND '999999 microseconds' FOLLOWING) AS c
           FROM /*schema*/river_job WHERE attempted_at IS NOT NULL) w), 0)::int
FROM /*schema*/river_job WHERE attempted_at IS NOT NULL`
