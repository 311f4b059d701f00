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

// NewLivenessService returns the liveness service a runtime on schema
// would run, under process id id.
func NewLivenessService(pool *pgxpool.Pool, schema, id string, logger *slog.Logger) Service {
	return newLiveness(pool, schema, logger, id, []string{"default"}, 3*time.Second, func(error) {})
}

// RiverService returns the service that starts and stops rt's River client.
func RiverService(rt *Runtime) Service { return &riverService{rt: rt} }

// CopiesBatch reports whether EnqueueManyTx would write items with its own
// COPY (copyInsert) rather than River's insert.
func CopiesBatch(c *Client, items []EnqueueItem) bool {
	if c.copy == nil || otelConfigured() {
		return false
	}
	_, ok, err := c.copy.copyJobs(items)
	return ok && err == nil
}
