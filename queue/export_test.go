package queue

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sweep runs one liveness sweep of schema, as a runtime's sweep loop does.
func Sweep(ctx context.Context, pool *pgxpool.Pool, schema string, timeout time.Duration) (time.Duration, error) {
	return newSweeper(pool, schema, slog.New(slog.DiscardHandler)).sweep(ctx, timeout)
}

// SweepTx runs one liveness sweep of schema inside tx and returns the ids
// of the processes it declared dead.
func SweepTx(ctx context.Context, tx pgx.Tx, pool *pgxpool.Pool, schema string, timeout time.Duration) ([]string, error) {
	res, err := newSweeper(pool, schema, slog.New(slog.DiscardHandler)).sweepTx(ctx, tx, timeout)
	ids := make([]string, len(res.dead))
	for i, p := range res.dead {
		ids[i] = p.id
	}
	return ids, err
}
