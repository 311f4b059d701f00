package riverjob

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CopyJobs writes rows into River's job table with COPY, for benchmarks
// that need a large table fast (columns names the job columns src gives),
// and returns how many.
func CopyJobs(ctx context.Context, pool *pgxpool.Pool, schema string, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "river_job"}, columns, src)
	if err != nil {
		return n, fmt.Errorf("error copying into River's job table: %w", err)
	}
	return n, nil
}

// VacuumAnalyze vacuums River's job table and refreshes its statistics, as
// autovacuum would in time, for a benchmark's freshly seeded table.
func VacuumAnalyze(ctx context.Context, db DBTX, schema string) error {
	if _, err := db.Exec(ctx, q(schema, vacuumAnalyzeSQL)); err != nil {
		return fmt.Errorf("error vacuuming River's job table: %w", err)
	}
	return nil
}

const vacuumAnalyzeSQL = `VACUUM ANALYZE /*schema*/river_job`

// AllVisible returns how many pages of River's job table the visibility
// map marks all-visible and how many it has, as of its last VACUUM: the
// dashboard's capped counts are index-only scans, which read the heap for
// every page not marked.
func AllVisible(ctx context.Context, db DBTX, schema string) (visible, pages int64, err error) {
	if err := db.QueryRow(ctx, q(schema, allVisibleSQL)).Scan(&visible, &pages); err != nil {
		return 0, 0, fmt.Errorf("error reading the visibility of River's job table: %w", err)
	}
	return visible, pages, nil
}

const allVisibleSQL = `SELECT relallvisible::bigint, relpages::bigint FROM pg_class WHERE oid = '/*schema*/river_job'::regclass`
