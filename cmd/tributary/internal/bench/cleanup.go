package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// CleanupResult is the outcome of RunCleanup.
type CleanupResult struct {
	Rows           int           `json:"rows"`
	Kept           int           `json:"kept"`
	BatchSize      int           `json:"batch_size"`
	Statements     int           `json:"statements"`
	Timeouts       int           `json:"timeouts"`
	LongestBatch   time.Duration `json:"longest_batch_ns"`
	P50Batch       time.Duration `json:"p50_batch_ns"`
	P99Batch       time.Duration `json:"p99_batch_ns"`
	BatchedTotal   time.Duration `json:"batched_total_ns"`
	UnboundedTotal time.Duration `json:"unbounded_total_ns"`
}

// RunCleanup seeds rows SENT outbox rows past retention (and rows/10
// recent ones, which must stay) in a fresh schema, deletes them with the
// clean-up job's Cleaner (bounded batches of at most batchSize under a
// statement timeout), then reseeds and deletes the same rows with one
// unbounded DELETE as the baseline, and writes a table of both to w. The
// longest statement bounds how long any row lock was held.
func RunCleanup(ctx context.Context, pool *pgxpool.Pool, rows, batchSize int, w io.Writer) (*CleanupResult, error) {
	res, err := benchCleanup(ctx, pool, rows, batchSize)
	if err != nil {
		return nil, err
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "clean-up of %d SENT outbox rows past retention (%d recent rows kept)\n\n", res.Rows, res.Kept)
	fmt.Fprintln(w, "| run | statements | cancelled by timeout | longest statement (row locks held) | p50 | p99 | total | rows/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| batched, up to %d rows per statement | %d | %d | %s | %s | %s | %s | %.0f |\n",
		res.BatchSize, res.Statements, res.Timeouts, ms(res.LongestBatch), ms(res.P50Batch), ms(res.P99Batch),
		res.BatchedTotal.Round(time.Millisecond), float64(res.Rows)/res.BatchedTotal.Seconds())
	fmt.Fprintf(w, "| baseline: one unbounded DELETE | 1 | - | %s | - | - | %s | %.0f |\n",
		ms(res.UnboundedTotal), res.UnboundedTotal.Round(time.Millisecond), float64(res.Rows)/res.UnboundedTotal.Seconds())
	return res, nil
}

const benchSeedOutboxSQL = `
INSERT INTO /*schema*/tributary_outbox
    (id, event_type, event_version, event_kind, payload, metadata, source_service, status, retry_count, created_at, sent_at)
SELECT gen_random_uuid(), 'bench.cleanup', 1, 'domain', '{"n": 1}', '{}', 'bench', 'SENT', 0,
       $1::timestamptz - g * interval '1 millisecond', $1::timestamptz - g * interval '1 millisecond'
FROM generate_series(1, $2) g`

func benchCleanup(ctx context.Context, pool *pgxpool.Pool, rows, batchSize int) (*CleanupResult, error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_cleanup")
	if err != nil {
		return nil, err
	}
	defer drop()
	now := time.Now().UTC()
	day := 24 * time.Hour
	res := &CleanupResult{Rows: rows, Kept: rows / 10, BatchSize: batchSize}
	seed := func() error {
		for _, part := range []struct {
			at time.Time
			n  int
		}{{now.Add(-8 * day), rows}, {now.Add(-day), res.Kept}} {
			if _, err := pool.Exec(ctx, queue.Qualify(schema, benchSeedOutboxSQL), part.at, part.n); err != nil {
				return fmt.Errorf("error seeding outbox rows: %w", err)
			}
		}
		_, err := pool.Exec(ctx, queue.Qualify(schema, `VACUUM ANALYZE /*schema*/tributary_outbox`))
		return err
	}
	if err := seed(); err != nil {
		return nil, err
	}

	quiet := slog.New(slog.DiscardHandler)
	client, err := queue.NewClient(pool, queue.ClientConfig{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	var took []time.Duration
	target := events.OutboxSentCleanup()
	cleaner, err := scheduler.NewCleaner(client, scheduler.CleanerConfig{
		Targets:       []queue.CleanupTarget{target},
		Logger:        quiet,
		NowFunc:       func() time.Time { return now },
		BatchDoneFunc: func(_ string, _ int64, d time.Duration) { took = append(took, d) },
	})
	if err != nil {
		return nil, err
	}
	out, err := cleaner.Clean(ctx, target.Name, 7*day, batchSize)
	if err != nil {
		return nil, err
	}
	var left int
	if err := pool.QueryRow(ctx, queue.Qualify(schema, `SELECT count(*) FROM /*schema*/tributary_outbox`)).Scan(&left); err != nil {
		return nil, err
	}
	if out.Deleted != int64(rows) || left != res.Kept {
		return nil, fmt.Errorf("clean-up deleted %d rows and left %d, want %d and %d", out.Deleted, left, rows, res.Kept)
	}
	res.Statements, res.Timeouts, res.LongestBatch, res.BatchedTotal = out.Batches, out.Timeouts, out.MaxBatch, out.Duration
	slices.Sort(took)
	res.P50Batch = took[len(took)/2]
	res.P99Batch = took[min(len(took)-1, len(took)*99/100)]

	if _, err := pool.Exec(ctx, queue.Qualify(schema, `TRUNCATE /*schema*/tributary_outbox`)); err != nil {
		return nil, err
	}
	if err := seed(); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := pool.Exec(ctx, queue.Qualify(schema, `DELETE FROM /*schema*/`+target.Table+` WHERE `+target.Where), now.Add(-7*day)); err != nil {
		return nil, fmt.Errorf("error running the unbounded DELETE: %w", err)
	}
	res.UnboundedTotal = time.Since(start)
	return res, nil
}
