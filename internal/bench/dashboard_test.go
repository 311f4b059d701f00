package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/bench"
	"github.com/tributary-run/tributary/internal/pgtest"
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
