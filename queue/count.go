package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Count is a number of rows as the read models report it: exact up to their
// count cap, the planner's estimate (Approximate) above it, so a count costs
// at most the cap's worth of index entries whatever the table's size.
type Count struct {
	N           int64 `json:"n"`
	Approximate bool  `json:"approximate,omitempty"`
}

// EstimateRows asks the planner how many rows query (a SELECT, already
// qualified) returns for args. A plan costs a fraction of a millisecond
// whatever the table's size; its figure is as fresh as the table's
// statistics.
func EstimateRows(ctx context.Context, db DBTX, query string, args ...any) (int64, error) {
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	var raw []byte
	if err := db.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&raw); err != nil {
		return 0, fmt.Errorf("error estimating a row count: %w", err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) == 0 {
		return 0, fmt.Errorf("error reading the planner's estimate: %v", err)
	}
	return int64(plan[0].Plan.Rows), nil
}

// ReadTx runs fn in a read-only transaction set up for the read models'
// queries over large tables: JIT off, custom plans, and a statement timeout
// (none when timeout is 0).
//
// JIT matters because the job counts' recursive skip scan has a large
// planner cost (the planner cannot know how few queues there are) that
// passes jit_above_cost, and compiling it takes far longer than running it.
// Custom plans matter because pgx prepares statements: after five runs
// Postgres may switch to a generic plan, which for "state = $1" assumes an
// average state and can walk the primary key through the whole table for a
// state that has no jobs.
func ReadTx(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, timeout time.Duration, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		ms := strconv.FormatInt(timeout.Milliseconds(), 10)
		if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true), set_config('statement_timeout', $1, true)", ms); err != nil {
			return fmt.Errorf("error preparing a read transaction: %w", err)
		}
		return fn(tx)
	})
}
