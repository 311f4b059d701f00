package events

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// or CLAIMED) of ids, as the forwarder runs it (explainClaimUpdate).
func (f *Forwarder) ExplainClaimUpdate(ctx context.Context, ids []string) (string, error) {
	var lines []string
	err := f.explainClaimUpdate(ctx, ids, "COSTS OFF", nil, func(rows pgx.Rows) error {
		var err error
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return strings.Join(lines, "\n"), err
}

// ExplainAnalyzeClaimUpdate runs the forwarder's claim update of ids under
// EXPLAIN with options (ANALYZE, FORMAT JSON among them) in a transaction
// it rolls back, and returns the plan with what each node did; with grow,
// the plan made before grow ran (see explainGeneric).
func (f *Forwarder) ExplainAnalyzeClaimUpdate(ctx context.Context, ids []string, options string, grow func(pgx.Tx) error) ([]byte, error) {
	var plan []byte
	err := f.explainClaimUpdate(ctx, ids, options, grow, scanPlan(&plan))
	return plan, err
}

// explainClaimUpdate explains the claim update of ids with options in a
// transaction begun as a forward round's: the plan the forwarder's batch
// runs (explainGeneric). With grow, the plan is made before grow runs.
func (f *Forwarder) explainClaimUpdate(ctx context.Context, ids []string, options string, grow func(pgx.Tx) error, read func(pgx.Rows) error) error {
	return explainGeneric(ctx, f.pool, claimTxOptionsGeneric, func(tx pgx.Tx) ([]any, error) {
		b, err := f.batchOf(ctx, tx, ids)
		return b.updateArgs(f.cfg.ID, time.Now()), err
	}, f.claimUpdateSQL, []string{"text[]", "text", "timestamptz", "text[]", "bigint[]"}, options, grow, read)
}

// explainGeneric explains sql (parameters of types) with options in a
// transaction begun with begin, which it rolls back, its arguments from
// args (run in the transaction first). The statement is prepared and
// explained as executed, so the plan is its generic plan where the
// transaction's settings ask for one (plan_cache_mode), made with them: the
// plan a pgx batch, whose statements are prepared, runs. A connection keeps
// a statement's generic plan once made, made on the tables as they were
// then: with grow, the statement is executed first (its writes rolled back
// to a savepoint), then grow changes the tables in the transaction, and the
// plan explained is the one made before.
func explainGeneric(ctx context.Context, pool *pgxpool.Pool, begin pgx.TxOptions, args func(pgx.Tx) ([]any, error),
	sql string, types []string, options string, grow func(pgx.Tx) error, read func(pgx.Rows) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, begin)
	if err != nil {
		return err
	}
	defer func() {
		_ = tx.Rollback(ctx)
		_, _ = conn.Exec(ctx, "DEALLOCATE explained")
	}()
	values, err := args(tx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "PREPARE explained("+strings.Join(types, ", ")+") AS "+sql); err != nil {
		return err
	}
	// EXECUTE takes no parameters of the statement around it: its
	// arguments go in as literals, quoted by Postgres.
	literals, params := make([]string, len(types)), make([]string, len(types))
	for i, typ := range types {
		literals[i] = "%L::" + typ
		params[i] = fmt.Sprintf("$%d::%s", i+1, typ)
	}
	var execute string
	if err := tx.QueryRow(ctx, "SELECT format('EXECUTE explained("+strings.Join(literals, ", ")+")', "+strings.Join(params, ", ")+")", values...).Scan(&execute); err != nil {
		return err
	}
	if grow != nil {
		if _, err := tx.Exec(ctx, "SAVEPOINT explained; "+execute+"; ROLLBACK TO SAVEPOINT explained"); err != nil {
			return err
		}
		if err := grow(tx); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN ("+options+") "+execute)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := read(rows); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// ExplainAnalyzeLanesRead runs the bus's read of every consumer's lanes of
// aggregates under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON), with the settings the
// bus reads them under in a forward round (genericPlanSQL, after the
// round's own), the plan made before grow (see explainGeneric).
func (b *Bus) ExplainAnalyzeLanesRead(ctx context.Context, pool *pgxpool.Pool, aggregates []string, grow func(pgx.Tx) error) ([]byte, error) {
	begin := pgx.TxOptions{BeginQuery: claimTxOptionsGeneric.BeginQuery + "; " + genericPlanSQL}
	var plan []byte
	err := explainGeneric(ctx, pool, begin, func(pgx.Tx) ([]any, error) { return []any{aggregates}, nil },
		b.lanes.lastSQL, []string{"text[]"}, "ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON", grow, scanPlan(&plan))
	return plan, err
}

// scanPlan reads a plan of EXPLAIN (FORMAT JSON) into plan.
func scanPlan(plan *[]byte) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		if !rows.Next() {
			return rows.Err()
		}
		return rows.Scan(plan)
	}
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

// NextClaimSize is the size a forward loop's claim asks for after a claim
// of size that selected, claimed and sent the rows described.
func (f *Forwarder) NextClaimSize(size, selected, sent, aggregates, bytes int) int {
	return f.nextClaimSize(size, batchResult{selected: selected, claimed: sent, sent: sent, batchSize: size, aggregates: aggregates, bytes: bytes})
}
