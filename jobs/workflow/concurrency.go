package workflow

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Per-key concurrency (Opts.ConcurrencyKey, Opts.ConcurrencyLimit) works
// like the events package's lanes, on River's pending state: a workflow
// that finds limit workflows of its key running is inserted queued, its
// first tasks pending on one extra dependency (its admission), so its jobs
// hold no worker slot. The key's row (tributary_workflow_concurrency)
// counts the admitted workflows and its lock orders admissions: the insert
// takes it, and so does the transaction that finishes (or cancels) an
// admitted workflow of the key, which admits the oldest queued one in the
// same transaction (UUIDv7 ids are creation order). Lock order: workflow
// rows first, then key rows in key order.

// reserveSlot takes key's lock at insert and says whether a new workflow
// with this limit runs now (a slot is free and none is queued before it;
// the slot is then taken) or waits queued.
func reserveSlot(ctx context.Context, tx pgx.Tx, sql *statements, key string, limit int) (admitted bool, err error) {
	if _, err := tx.Exec(ctx, sql.ensureKey, customPlan, key); err != nil {
		return false, fmt.Errorf("error creating concurrency key %q: %w", key, err)
	}
	if err := tx.QueryRow(ctx, sql.reserveSlot, customPlan, key, limit).Scan(&admitted); err != nil {
		return false, fmt.Errorf("error reserving a slot of concurrency key %q: %w", key, err)
	}
	return admitted, nil
}

// releaseSlots gives back the slots of finished admitted workflows of the
// keys (one per entry) and admits, per key, the oldest queued workflows
// while slots are free. It returns the queues of the released jobs.
func releaseSlots(ctx context.Context, tx pgx.Tx, sql *statements, schema string, keys []string, now time.Time) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	freed := map[string]int{}
	for _, k := range keys {
		freed[k]++
	}
	sorted := make([]string, 0, len(freed))
	for k := range freed {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	var queues []string
	for _, key := range sorted {
		var running int
		if err := tx.QueryRow(ctx, sql.releaseSlot, customPlan, key, freed[key]).Scan(&running); err != nil {
			return nil, fmt.Errorf("error releasing slots of concurrency key %q: %w", key, err)
		}
		for {
			var id string
			var limit int
			err := tx.QueryRow(ctx, sql.nextQueued, customPlan, key).Scan(&id, &limit)
			if err == pgx.ErrNoRows {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("error finding the next workflow of concurrency key %q: %w", key, err)
			}
			if running >= limit {
				break
			}
			ok, q, err := admit(ctx, tx, sql, schema, id, now)
			if err != nil {
				return nil, err
			}
			if ok {
				running++
			}
			queues = append(queues, q...)
		}
		if _, err := tx.Exec(ctx, sql.setRunning, customPlan, key, running); err != nil {
			return nil, fmt.Errorf("error counting slots of concurrency key %q: %w", key, err)
		}
	}
	return queues, nil
}

// admit starts a queued workflow: its first tasks lose their admission
// dependency and are released. ok is false when it was no longer queued
// (cancelled while this transaction waited for its lock).
func admit(ctx context.Context, tx pgx.Tx, sql *statements, schema, id string, now time.Time) (ok bool, queues []string, err error) {
	if _, err := lockWorkflows(ctx, tx, sql, []string{id}); err != nil {
		return false, nil, err
	}
	tag, err := tx.Exec(ctx, sql.admitWorkflow, customPlan, id, now)
	if err != nil {
		return false, nil, fmt.Errorf("error admitting workflow %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil, nil
	}
	rows, err := tx.Query(ctx, sql.queuedRoots, customPlan, id)
	if err != nil {
		return false, nil, fmt.Errorf("error admitting workflow %s: %w", id, err)
	}
	roots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, nil, fmt.Errorf("error admitting workflow %s: %w", id, err)
	}
	a := newAdvance(tx, sql, schema, now)
	wfs, ones, zeros := make([]string, len(roots)), make([]int32, len(roots)), make([]int32, len(roots))
	for i := range roots {
		wfs[i], ones[i] = id, 1
	}
	next, err := a.decide(ctx, sql.decrementDeps, wfs, roots, ones, zeros)
	if err != nil {
		return false, nil, err
	}
	if err := a.resolve(ctx, next); err != nil {
		return false, nil, err
	}
	queues, err = a.flush(ctx)
	return true, queues, err
}

const ensureKeySQL = `
INSERT INTO /*schema*/tributary_workflow_concurrency (key, running) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING`

// reserveSlotSQL takes a slot when one is free and nobody queues; the row
// lock it takes is held to the insert's commit.
const reserveSlotSQL = `
WITH k AS (SELECT key, running FROM /*schema*/tributary_workflow_concurrency WHERE key = $1 FOR UPDATE),
free AS (
    SELECT k.running < $2 AND NOT EXISTS (SELECT 1 FROM /*schema*/tributary_workflow w WHERE w.concurrency_key = $1 AND w.queued) AS ok FROM k
),
taken AS (
    UPDATE /*schema*/tributary_workflow_concurrency c SET running = c.running + 1
    FROM free WHERE c.key = $1 AND free.ok
    RETURNING true
)
SELECT ok FROM free`

const releaseSlotSQL = `
UPDATE /*schema*/tributary_workflow_concurrency SET running = greatest(running - $2, 0) WHERE key = $1
RETURNING running`

const setRunningSQL = `
UPDATE /*schema*/tributary_workflow_concurrency SET running = $2 WHERE key = $1`

const nextQueuedSQL = `
SELECT id::text, concurrency_limit FROM /*schema*/tributary_workflow
WHERE concurrency_key = $1 AND queued
ORDER BY id LIMIT 1`

const admitWorkflowSQL = `
UPDATE /*schema*/tributary_workflow SET queued = false, updated_at = $2 WHERE id = $1::uuid AND queued AND status = 'running'`

// queuedRootsSQL returns a queued workflow's first tasks, which wait only
// for the admission.
const queuedRootsSQL = `
SELECT name FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid AND state = 'pending' AND cardinality(deps) = 0`

const setQueuedSQL = `
UPDATE /*schema*/tributary_workflow SET concurrency_key = $2, concurrency_limit = $3, queued = $4 WHERE id = $1::uuid`
