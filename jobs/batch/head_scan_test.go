package batch

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestHeadQueriesWalkTheIndex checks the plans of the head queries on a
// table Postgres has no statistics for (a new schema; autovacuum may be
// off): an ordered scan of the (stream, id) index that stops after the
// limit, not a bitmap scan of the whole stream and a sort.
func TestHeadQueriesWalkTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// One item per chunk, as staged one by one (or before migration
	// 0015): the most rows a head of MaxEvents items can have.
	const streams, perStream = 5, 4000
	_, err := db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_batch_chunk (stream, payload, byte_size, created_at)
		SELECT 's' || s, convert_to(format('{"i":%s,"pad":"%s"}', i, repeat('x', 150)), 'UTF8'), 160, now()
		FROM generate_series(0, $1 - 1) AS s, generate_series(1, $2) AS i`), streams, perStream)
	require.NoError(t, err)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"due":   {dueSQL, []any{"s1", 3000}},
		"claim": {measureClaimSQL, []any{"s1", 3000, 10000, int64(1 << 30)}},
	} {
		t.Run(name, func(t *testing.T) {
			var plan string
			err := queryHead(ctx, db.Pool, queue.Qualify(db.Schema, "EXPLAIN (COSTS OFF, FORMAT JSON) "+q.sql), q.args, &plan)
			require.NoError(t, err)
			require.Contains(t, plan, "Index", "head query plan:\n%s", plan)
			require.NotContains(t, plan, "Sort", "head query plan:\n%s", plan)
			require.NotContains(t, plan, "Bitmap", "head query plan:\n%s", plan)
		})
	}
}
