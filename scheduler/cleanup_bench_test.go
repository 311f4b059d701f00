//go:build bench

package scheduler

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestCleanupBench measures the clean-up of a large SENT outbox backlog
// (TRIBUTARY_BENCH_CLEANUP_ROWS rows, default 1,000,000) in bounded batches,
// beside a baseline from the same run: one unbounded DELETE of the same
// rows, which holds every row lock until it finishes. Run it with
// `make bench` or:
//
//	go test -tags bench -run TestCleanupBench -v -timeout 30m ./scheduler/
func TestCleanupBench(t *testing.T) {
	rows := 1_000_000
	if raw := os.Getenv("TRIBUTARY_BENCH_CLEANUP_ROWS"); raw != "" {
		n, err := strconv.Atoi(raw)
		require.NoError(t, err, "TRIBUTARY_BENCH_CLEANUP_ROWS")
		rows = n
	}
	batchSize := CleanupBatchSizeDefault
	if raw := os.Getenv("TRIBUTARY_BENCH_CLEANUP_BATCH"); raw != "" {
		n, err := strconv.Atoi(raw)
		require.NoError(t, err, "TRIBUTARY_BENCH_CLEANUP_BATCH")
		batchSize = n
	}
	ctx := context.Background()
	db := pgtest.New(t)
	now := time.Now().UTC()
	day := 24 * time.Hour
	keep := rows / 10

	seed := func() time.Duration {
		start := time.Now()
		seedOutbox(t, db, "SENT", rows, now.Add(-8*day))
		seedOutbox(t, db, "SENT", keep, now.Add(-1*day))
		_, err := db.Pool.Exec(ctx, db.Q(`VACUUM ANALYZE /*schema*/tributary_outbox`))
		require.NoError(t, err)
		return time.Since(start)
	}

	seedTook := seed()
	var took []time.Duration
	cleaner := newCleaner(t, db.Client(t), CleanerConfig{
		Logger:  pgtest.Logger(t),
		NowFunc: func() time.Time { return now },
		BatchDoneFunc: func(_ string, _ int64, d time.Duration) {
			took = append(took, d)
		},
	})
	res, err := cleaner.Clean(ctx, targetOutboxSent, 7*day, batchSize)
	require.NoError(t, err)
	require.EqualValues(t, rows, res.Deleted)
	require.Equal(t, map[string]int{"SENT": keep}, countOutbox(t, db), "rows not past retention stay")

	// Baseline: the same rows in one statement.
	_, err = db.Pool.Exec(ctx, db.Q(`TRUNCATE /*schema*/tributary_outbox`))
	require.NoError(t, err)
	seed()
	baseStart := time.Now()
	tag, err := db.Pool.Exec(ctx, db.Q(`DELETE FROM /*schema*/tributary_outbox WHERE status = 'SENT' AND sent_at < $1`), now.Add(-7*day))
	require.NoError(t, err)
	baseTook := time.Since(baseStart)
	require.EqualValues(t, rows, tag.RowsAffected())

	sorted := slices.Clone(took)
	slices.Sort(sorted)
	pct := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Printf("\nclean-up of %d SENT outbox rows past retention (+%d recent rows kept), seeded in %s\n\n", rows, keep, seedTook.Round(time.Millisecond))
	fmt.Printf("| run | statements | cancelled by timeout | longest statement (row locks held) | p50 | p99 | total | rows/s |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| batched, up to %d rows per statement | %d | %d | %s | %s | %s | %s | %.0f |\n",
		batchSize, res.Batches, res.Timeouts, ms(res.MaxBatch), ms(pct(0.5)), ms(pct(0.99)), res.Duration.Round(time.Millisecond),
		float64(res.Deleted)/res.Duration.Seconds())
	fmt.Printf("| baseline: one unbounded DELETE | 1 | - | %s | - | - | %s | %.0f |\n\n",
		ms(baseTook), baseTook.Round(time.Millisecond), float64(rows)/baseTook.Seconds())
	require.Less(t, res.MaxBatch, time.Second, "a batch held its row locks for more than a second")
}
