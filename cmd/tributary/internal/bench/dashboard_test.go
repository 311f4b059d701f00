package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/migrations"
)

// TestRunDashboard runs a small dashboard benchmark end to end: the seeded
// jobs and workflows are read back by the dashboard's pages (every request
// answered 200, the deep cursors found, the seeded workflows found by key),
// not how fast.
func TestRunDashboard(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	res, err := bench.RunDashboard(ctx, pool, bench.DashboardOptions{Rows: 12_000, Workflows: 200, Requests: 5, Logger: pgtest.Logger(t)}, &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	names := map[string]bool{}
	for _, r := range res.Dashboard {
		require.Equal(t, 200, r.Status, r.Name)
		names[r.Name] = true
	}
	for _, name := range []string{
		"dashboard GET /metrics",
		"dashboard GET /jobs (page 201 by cursor, HTML)",
		"dashboard GET /api/jobs?kind=report.build&before=<10%>",
		"dashboard GET /api/workflows?after=<middle>",
		"dashboard GET /workflows/ID (5 tasks, HTML)",
		"dashboard GET /workflows/ID (1002 tasks, HTML)",
		"dashboard GET /workflows/ID?tasks=900 (1002 tasks, HTML)",
	} {
		require.True(t, names[name], "no %q in %v", name, names)
	}
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", res.Schema).Scan(&exists))
	require.False(t, exists, "the schema is dropped without Keep")
}

// TestRunDashboardReusesAnOlderSchema: a schema kept by an earlier version
// (here: its newest migration rolled back) is migrated up before the pages
// are measured on it, so every page answers (the consumers page reads
// migration 0016's lane events, and answers 500 without them).
func TestRunDashboardReusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	seeded, err := bench.RunDashboard(ctx, pool, bench.DashboardOptions{Rows: 2_000, Workflows: -1, Requests: 1, Keep: true, Logger: pgtest.Logger(t)}, &out)
	require.NoError(t, err, out.String())
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{seeded.Schema}.Sanitize()+" CASCADE")
	})
	m, err := migrations.New(pool, migrations.Config{Schema: seeded.Schema})
	require.NoError(t, err)
	down, err := m.Down(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, down.Steps)

	out.Reset()
	res, err := bench.RunDashboard(ctx, pool, bench.DashboardOptions{Rows: 2_000, Workflows: -1, Requests: 1, Reuse: seeded.Schema, Logger: pgtest.Logger(t)}, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), fmt.Sprintf("migrated the reused schema: tributary %04d %s", down.Steps[0].Version, down.Steps[0].Name))
	for _, r := range res.Dashboard {
		require.Equal(t, 200, r.Status, r.Name)
	}
}
