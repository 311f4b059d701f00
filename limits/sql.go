package limits

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// statements are tributary_limit's statements, qualified for one schema.
// The statements on river_job are internal/riverjob's (limits.go).
type statements struct {
	declare, lock, setCursor, names, list, setOverride, resetOverrides, resetMax, exists string
}

func newStatements(schema string) statements {
	q := func(sql string) string { return queue.Qualify(schema, sql) }
	return statements{
		declare: q(declareSQL), lock: q(lockSQL), setCursor: q(setCursorSQL), names: q(namesSQL),
		list: q(listSQL), setOverride: q(setOverrideSQL), resetOverrides: q(resetOverridesSQL), resetMax: q(resetMaxSQL), exists: q(existsSQL),
	}
}

// declareSQL writes what the code declares and keeps the run-time
// override and the cursor.
const declareSQL = `
INSERT INTO /*schema*/tributary_limit (name, kind, queue, key_arg, declared_max, total, rate, period_ms, on_busy, max_override, cursor_key, declared_at, updated_at)
SELECT n, k, q, a, m, t, r, p, b, NULL, '', now(), now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::int[], $8::bigint[], $9::text[]) AS d(n, k, q, a, m, t, r, p, b)
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, queue = excluded.queue, key_arg = excluded.key_arg,
    declared_max = excluded.declared_max, total = excluded.total, rate = excluded.rate, period_ms = excluded.period_ms, on_busy = excluded.on_busy,
    declared_at = excluded.declared_at`

// lockSQL serialises the admission of one limit: the row lock is held to
// the pass's commit. Whoever holds it (another admitter's pass, or a
// transaction that admitted a job at insert, migration 0031) is not waited
// for: the pass finds no row, and the admitter looks again shortly, then
// counting what the holder committed. A pass that waited would hold up
// every other limit of its admitter behind an open transaction. It reads
// the Total, Rate and period in force: the overrides, else the
// declaration.
const lockSQL = `
SELECT declared_max, max_override, coalesce(total_override, total), coalesce(rate_override, rate), coalesce(period_override_ms, period_ms), on_busy, cursor_key, holder
FROM /*schema*/tributary_limit WHERE name = $1 FOR UPDATE SKIP LOCKED`

const setCursorSQL = `UPDATE /*schema*/tributary_limit SET cursor_key = $2 WHERE name = $1`

// namesSQL lists the limits of jobs; the others are holdersDue's.
const namesSQL = `SELECT name FROM /*schema*/tributary_limit WHERE holder = 'jobs' ORDER BY name`

const listSQL = `
SELECT name, kind, queue, key_arg, declared_max, max_override, total, total_override, rate, rate_override, period_ms, period_override_ms, on_busy, updated_at, holder
FROM /*schema*/tributary_limit ORDER BY name`

// setOverrideSQL sets the overrides given (NULL: keeps that one). A rate or
// period override needs a declared rate: migration 0029's rate door reads
// the declared one; a total needs a limit of jobs (a workflow key has one
// key). It returns nothing for a limit that cannot take them.
const setOverrideSQL = `
UPDATE /*schema*/tributary_limit
SET max_override = coalesce($2, max_override), total_override = coalesce($3, total_override),
    rate_override = coalesce($4, rate_override), period_override_ms = coalesce($5, period_override_ms), updated_at = now()
WHERE name = $1 AND (rate > 0 OR ($4::int IS NULL AND $5::bigint IS NULL)) AND (holder = 'jobs' OR $3::int IS NULL)
RETURNING name`

const resetOverridesSQL = `
UPDATE /*schema*/tributary_limit SET max_override = NULL, total_override = NULL, rate_override = NULL, period_override_ms = NULL, updated_at = now()
WHERE name = $1 RETURNING name`

const resetMaxSQL = `UPDATE /*schema*/tributary_limit SET max_override = NULL, updated_at = now() WHERE name = $1 RETURNING name`

// existsSQL tells an unknown limit from one a statement above refused, or
// from one whose row a pass found held (lockSQL).
const existsSQL = `SELECT rate, holder FROM /*schema*/tributary_limit WHERE name = $1`

func declare(ctx context.Context, db queue.DBTX, sql statements, limits []Limit) error {
	if len(limits) == 0 {
		return nil
	}
	n := len(limits)
	names, kinds, queues, args := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	maxes, totals, rates, periods, busy := make([]int32, n), make([]int32, n), make([]int32, n), make([]int64, n), make([]string, n)
	for i, l := range limits {
		names[i], kinds[i], queues[i], args[i], busy[i] = l.Name, l.Kind, l.Queue, l.KeyArg, string(l.OnBusy)
		maxes[i], totals[i], rates[i], periods[i] = int32(l.Max), int32(l.Total), int32(l.Rate), l.period().Milliseconds()
	}
	if _, err := db.Exec(ctx, sql.declare, names, kinds, queues, args, maxes, totals, rates, periods, busy); err != nil {
		return fmt.Errorf("error declaring limits: %w", err)
	}
	return nil
}

// effectiveMax is the per-key cap in force: the override, else the
// declared Max, where a declared 0 (a Total or Rate without Max) is no cap.
func effectiveMax(declared int, override *int) int {
	switch {
	case override != nil:
		return *override
	case declared == 0:
		return unlimited
	}
	return declared
}

func names(ctx context.Context, db queue.DBTX, sql statements) ([]string, error) {
	rows, err := db.Query(ctx, sql.names)
	if err != nil {
		return nil, fmt.Errorf("error listing limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error listing limits: %w", err)
	}
	return out, nil
}
