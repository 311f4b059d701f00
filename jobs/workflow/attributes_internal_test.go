package workflow

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestAttributeListPlan checks on 100,000 ANALYZEd workflows that a listing
// by attributes reads the (key, value, workflow_id) index backwards and
// stops after the page, without a sort, for a frequent value, a rare one,
// one held only by the oldest workflows (where a plan that walks the
// workflows by id and filters reads almost all of them), and two ANDed.
func TestAttributeListPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	c := clientOn(t, db)
	_, err := db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_workflow (id, name, status, task_count, tasks_pending, tasks_active, tasks_completed,
    tasks_failed, tasks_cancelled, tasks_skipped, created_at, updated_at, finished_at)
SELECT (lpad(to_hex(i), 12, '0') || '7000' || '8000' || lpad(to_hex(i), 12, '0'))::uuid, 'report',
    CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END, 1, 0, 0, 1, 0, 0, 0, now(), now(), now()
FROM generate_series(1, 100000) i;
INSERT INTO /*schema*/tributary_workflow_attribute (workflow_id, key, value)
SELECT id, 'region', 'r-' || (n % 4) FROM (SELECT id, row_number() OVER (ORDER BY id) n FROM /*schema*/tributary_workflow) w
UNION ALL
SELECT id, 'customer', 'c-' || (n % 10000) FROM (SELECT id, row_number() OVER (ORDER BY id) n FROM /*schema*/tributary_workflow) w
UNION ALL
SELECT id, 'batch', 'old' FROM (SELECT id FROM /*schema*/tributary_workflow ORDER BY id LIMIT 2000) w;
ANALYZE /*schema*/tributary_workflow;
ANALYZE /*schema*/tributary_workflow_attribute;`))
	require.NoError(t, err)

	for _, attrs := range []map[string]string{
		{"region": "r-1"},
		{"customer": "c-42"},
		{"batch": "old"},
		{"region": "r-2", "customer": "c-42"},
	} {
		sql, args, err := c.listQuery(ListParams{Attributes: attrs})
		require.NoError(t, err)
		rows, err := db.Pool.Query(ctx, "EXPLAIN "+sql+" LIMIT 51", args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		text := strings.Join(plan, "\n")
		t.Logf("%v:\n%s", attrs, text)
		require.Contains(t, text, "Index Only Scan Backward using tributary_workflow_attribute_kv_idx", "%v", attrs)
		require.NotContains(t, text, "Seq Scan", "%v", attrs)
		require.NotContains(t, text, "Sort", "%v", attrs)
		require.NotRegexp(t, `(?m)^\s*(->  )?Filter:`, text, "%v: a plan that filters workflow rows reads more than the page", attrs)
	}
}
