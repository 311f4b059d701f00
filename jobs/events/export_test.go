package events

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// The package's internals the external tests drive directly.

// SelectClaim runs the forwarder's claim query.
func (f *Forwarder) SelectClaim(ctx context.Context, tx pgx.Tx) (ids []string, candidates int, err error) {
	if _, err := tx.Exec(ctx, claimSetupSQL); err != nil {
		return nil, 0, err
	}
	b, candidates, err := f.selectClaim(ctx, tx, time.Now(), claimScope{})
	return b.ids, candidates, err
}

// SelectClaimShare runs the forwarder's claim query as the forward loop
// that claims share of shares.
func (f *Forwarder) SelectClaimShare(ctx context.Context, tx pgx.Tx, share, shares int) (ids []string, candidates int, err error) {
	if _, err := tx.Exec(ctx, claimSetupSQL); err != nil {
		return nil, 0, err
	}
	b, candidates, err := f.selectClaim(ctx, tx, time.Now(), claimScope{share: share, shares: shares})
	return b.ids, candidates, err
}

// ExplainClaimUpdate returns the plan of the forwarder's claim update (SENT
// or CLAIMED) of ids, in a transaction begun as a claim's is.
func (f *Forwarder) ExplainClaimUpdate(ctx context.Context, ids []string) (string, error) {
	tx, err := f.pool.BeginTx(ctx, claimTxOptionsGeneric)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, claimRestSQL); err != nil {
		return "", err
	}
	b, err := f.batchOf(ctx, tx, ids)
	if err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+f.claimUpdateSQL, b.updateArgs(f.cfg.ID, time.Now())...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// ExplainAnalyzeClaimUpdate runs the forwarder's claim update of ids under
// EXPLAIN (ANALYZE, FORMAT JSON) in a transaction it rolls back, and returns
// the plan with what each node did.
func (f *Forwarder) ExplainAnalyzeClaimUpdate(ctx context.Context, ids []string) ([]byte, error) {
	tx, err := f.pool.BeginTx(ctx, claimTxOptionsGeneric)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, claimRestSQL); err != nil {
		return nil, err
	}
	b, err := f.batchOf(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	var plan []byte
	err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) "+f.claimUpdateSQL, b.updateArgs(f.cfg.ID, time.Now())...).Scan(&plan)
	return plan, err
}

// batchOf is the claimBatch of the outbox rows ids, as the claim's select
// would return it.
func (f *Forwarder) batchOf(ctx context.Context, tx pgx.Tx, ids []string) (claimBatch, error) {
	b := claimBatch{ids: ids}
	for _, id := range ids {
		var aggregate string
		var position int64
		if err := tx.QueryRow(ctx, queue.Qualify(f.cfg.Schema, `SELECT coalesce(aggregate_id, ''), position FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&aggregate, &position); err != nil {
			return b, err
		}
		b.rowAggregates = append(b.rowAggregates, aggregate)
		b.positions = append(b.positions, position)
	}
	return b, nil
}

// ForwardOnce claims one batch, publishes it and records the outcome, as
// one round of a forward loop. more reports that rows were sent out of a
// full batch, so another may be waiting.
func (f *Forwarder) ForwardOnce(ctx context.Context) (more bool, err error) {
	res, err := f.forwardOnce(ctx, ctx, claimScope{})
	return res.more(), err
}

// ResetStale runs the stale-claim reset once.
func (f *Forwarder) ResetStale(ctx context.Context) { f.resetStale(ctx) }

// RepairLanes runs the lane repair sweep once and returns how many lanes it
// moved on.
func (d *Dispatcher) RepairLanes(ctx context.Context) int { return d.repairLanes(ctx) }

// NewBus returns a bus on client, as Install makes one.
func NewBus(client *queue.Client) (*Bus, error) { return newBus(client) }

// DecodeStrict decodes a payload as dispatch and the emitter do.
func DecodeStrict(raw []byte, dst any) error { return decodeStrict(raw, dst) }
