package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/limits"
)

// Per-key concurrency (Opts.ConcurrencyKey, Opts.ConcurrencyLimit) is a
// limit of package limits whose slots are whole workflows
// (docs/decisions/0035-workflow-keys-on-limits.md): the row "workflow:KEY"
// of tributary_limit, holder 'workflows'. A workflow that finds the key's
// max of its workflows admitted and running is inserted queued, its first
// tasks pending on one extra dependency (its admission), so its jobs hold
// no worker slot. A slot is an admitted workflow that has not finished,
// counted, and the row's lock orders admissions: the insert takes it, and
// so does the transaction that finishes (or cancels) an admitted workflow
// of the key, which admits the oldest queued ones (UUIDv7 ids are creation
// order) while the max in force (the override of `tributary limits set`,
// else the declared one) leaves room; an admitter's pass after an override
// calls LimitHolder. Lock order: workflow rows first, then key rows in key
// order, then the queued workflows they admit.

// reserveSlot declares key's limit (max: the new workflow's
// ConcurrencyLimit, as the latest insert declares it), takes its row's
// lock to the insert's commit, and says whether a new workflow runs now (a
// slot is free and none is queued before it) or waits queued.
func reserveSlot(ctx context.Context, tx pgx.Tx, sql *statements, key string, declared int) (admitted bool, err error) {
	var maxN int
	if err := tx.QueryRow(ctx, sql.declareKey, customPlan, limits.WorkflowLimitName(key), declared).Scan(&maxN); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("concurrency key %q: the limit %q is a declared limit of jobs", key, limits.WorkflowLimitName(key))
		}
		return false, fmt.Errorf("error declaring the limit of concurrency key %q: %w", key, err)
	}
	used, queued, err := keyUse(ctx, tx, sql, key)
	if err != nil {
		return false, err
	}
	return used < maxN && !queued, nil
}

// keyUse counts key's admitted running workflows and says whether one is
// queued. Both read the index of the key's running workflows by queued,
// the count only the admitted ones (about the key's max), whatever the
// number queued.
func keyUse(ctx context.Context, tx pgx.Tx, sql *statements, key string) (used int, queued bool, err error) {
	if err := tx.QueryRow(ctx, sql.keyUse, customPlan, key).Scan(&used, &queued); err != nil {
		return 0, false, fmt.Errorf("error counting the workflows of concurrency key %q: %w", key, err)
	}
	return used, queued, nil
}

// lockKey takes the lock of key's limit row and returns its max in force.
// A key without a row (deleted by hand) gets one, declared with the limit
// of its latest workflow.
func lockKey(ctx context.Context, tx pgx.Tx, sql *statements, key string) (int, error) {
	name := limits.WorkflowLimitName(key)
	var maxN int
	err := tx.QueryRow(ctx, sql.lockKey, customPlan, name).Scan(&maxN)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, sql.redeclareKey, customPlan, name, key).Scan(&maxN)
	}
	if err != nil {
		return 0, fmt.Errorf("error locking the limit of concurrency key %q: %w", key, err)
	}
	return maxN, nil
}

// releaseSlots admits, per key of workflows that finished in tx (one entry
// each), the oldest queued workflows while the key's max leaves room. It
// returns the queues of the released jobs.
func releaseSlots(ctx context.Context, tx pgx.Tx, sql *statements, schema string, keys []string, now time.Time) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var queues []string
	for _, key := range sorted {
		maxN, err := lockKey(ctx, tx, sql, key)
		if err != nil {
			return nil, err
		}
		used, queued, err := keyUse(ctx, tx, sql, key)
		if err != nil {
			return nil, err
		}
		if !queued {
			continue
		}
		_, q, err := admitQueued(ctx, tx, sql, schema, key, maxN-used, now)
		if err != nil {
			return nil, err
		}
		queues = append(queues, q...)
	}
	return queues, nil
}

// admitQueued admits up to room of key's oldest queued workflows; the
// caller holds the lock of the key's row.
func admitQueued(ctx context.Context, tx pgx.Tx, sql *statements, schema, key string, room int, now time.Time) (admitted int, queues []string, err error) {
	for admitted < room {
		var id string
		err := tx.QueryRow(ctx, sql.nextQueued, customPlan, key).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			return admitted, queues, fmt.Errorf("error finding the next workflow of concurrency key %q: %w", key, err)
		}
		ok, q, err := admit(ctx, tx, sql, schema, id, now)
		if err != nil {
			return admitted, queues, err
		}
		if ok { // else cancelled while this transaction waited for its lock
			admitted++
		}
		queues = append(queues, q...)
	}
	return admitted, queues, nil
}

// LimitHolder is the limits.HolderAdmitter of workflow concurrency keys in
// schema: put it into limits.Config.Holders of the worker processes
// (tributary.App does), so that an override of a key's limit (`tributary
// limits set workflow:KEY N`) admits its queued workflows at once rather
// than when the next of its workflows finishes.
func LimitHolder(schema string) limits.HolderAdmitter {
	return &limitHolder{sql: qualify(schema), schema: schema}
}

type limitHolder struct {
	sql    statements
	schema string
}

func (h *limitHolder) Holder() limits.Holder { return limits.HolderWorkflows }

func (h *limitHolder) AdmitTx(ctx context.Context, tx pgx.Tx, limit string, maxN int) (limits.HolderAdmission, error) {
	key, ok := strings.CutPrefix(limit, limits.WorkflowPrefix)
	if !ok {
		return limits.HolderAdmission{}, fmt.Errorf("limit %q is not a workflow concurrency key's", limit)
	}
	var res limits.HolderAdmission
	if err := tx.QueryRow(ctx, h.sql.keyWaiting, customPlan, key).Scan(&res.Used, &res.Waiting); err != nil {
		return res, fmt.Errorf("error counting the workflows of concurrency key %q: %w", key, err)
	}
	var err error
	res.Admitted, res.Queues, err = admitQueued(ctx, tx, &h.sql, h.schema, key, min(maxN-res.Used, res.Waiting), time.Now().UTC())
	return res, err
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

// declareKeySQL declares a key's limit at an insert and takes its row's
// lock; it returns the max in force (nothing when a limit of jobs has the
// name).
const declareKeySQL = `
INSERT INTO /*schema*/tributary_limit AS l (name, kind, queue, key_arg, declared_max, total, rate, period_ms, on_busy, max_override, cursor_key, declared_at, updated_at, holder)
VALUES ($1, '', '', '', $2, 0, 0, 0, '', NULL, '', now(), now(), 'workflows')
ON CONFLICT (name) DO UPDATE SET declared_max = excluded.declared_max, declared_at = excluded.declared_at
WHERE l.holder = 'workflows'
RETURNING coalesce(l.max_override, l.declared_max)`

const lockKeySQL = `
SELECT coalesce(max_override, declared_max) FROM /*schema*/tributary_limit WHERE name = $1 AND holder = 'workflows' FOR UPDATE`

// redeclareKeySQL recreates a key's missing row with the limit of its
// latest workflow (a concurrent one is locked instead).
const redeclareKeySQL = `
INSERT INTO /*schema*/tributary_limit AS l (name, kind, queue, key_arg, declared_max, total, rate, period_ms, on_busy, max_override, cursor_key, declared_at, updated_at, holder)
SELECT $1, '', '', '', greatest(coalesce((SELECT concurrency_limit FROM /*schema*/tributary_workflow WHERE concurrency_key = $2 ORDER BY id DESC LIMIT 1), 1), 1),
    0, 0, 0, '', NULL, '', now(), now(), 'workflows'
ON CONFLICT (name) DO UPDATE SET declared_at = l.declared_at
WHERE l.holder = 'workflows'
RETURNING coalesce(l.max_override, l.declared_max)`

// keyUseSQL counts a key's admitted running workflows (the slots it
// holds) and tells whether one is queued, by migration 0036's partial
// index on (concurrency_key, queued).
const keyUseSQL = `
SELECT (SELECT count(*) FROM /*schema*/tributary_workflow WHERE concurrency_key = $1 AND status = 'running' AND NOT queued)::integer,
    EXISTS (SELECT 1 FROM /*schema*/tributary_workflow WHERE concurrency_key = $1 AND status = 'running' AND queued)`

// keyWaitingSQL counts a key's admitted and queued running workflows, for
// an admitter's pass (after an override, or its poll).
const keyWaitingSQL = `
SELECT (count(*) FILTER (WHERE NOT queued))::integer, (count(*) FILTER (WHERE queued))::integer
FROM /*schema*/tributary_workflow WHERE concurrency_key = $1 AND status = 'running'`

const nextQueuedSQL = `
SELECT id::text FROM /*schema*/tributary_workflow
WHERE concurrency_key = $1 AND queued AND status = 'running'
ORDER BY id LIMIT 1`

const admitWorkflowSQL = `
UPDATE /*schema*/tributary_workflow SET queued = false, updated_at = $2 WHERE id = $1::uuid AND queued AND status = 'running'`

// queuedRootsSQL returns a queued workflow's first tasks, which wait only
// for the admission.
const queuedRootsSQL = `
SELECT name FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid AND state = 'pending' AND cardinality(deps) = 0`

const setQueuedSQL = `
UPDATE /*schema*/tributary_workflow SET concurrency_key = $2, concurrency_limit = $3, queued = $4 WHERE id = $1::uuid`
