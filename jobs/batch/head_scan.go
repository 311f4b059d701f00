package batch

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// The head queries (dueSQL, measureClaimSQL) read the first N items of a
// stream in id order. Postgres should walk the (stream, id) index and stop
// after N. Where it believes the stream holds fewer than N items, which is
// what it believes of a table it has no statistics for or whose pages the
// visibility map does not cover (the head of a busy stream is always
// freshly written and deleted), it picks a bitmap scan of every index entry
// of the stream, deleted ones included, and a sort instead, measured at
// 46 ms against 4 ms for one head of 7,000 items. So each head query runs
// with sorts disabled, in the same round trip, and the setting is put back
// after it.
const (
	sortsOffSQL  = `SELECT set_config('tributary.enable_sort', current_setting('enable_sort'), true), set_config('enable_sort', 'off', true)`
	sortsBackSQL = `SELECT set_config('enable_sort', current_setting('tributary.enable_sort'), true)`
)

// batcher is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common to
// send several statements in one round trip (in one implicit transaction
// when not in one already).
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queryHead runs the head query sql (one row, scanned into dest) with sorts
// disabled for that query only.
func queryHead(ctx context.Context, db queue.DBTX, sql string, args []any, dest ...any) error {
	b, ok := db.(batcher)
	if !ok {
		return db.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	batch := &pgx.Batch{}
	batch.Queue(sortsOffSQL)
	batch.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	batch.Queue(sortsBackSQL)
	return b.SendBatch(ctx, batch).Close()
}
