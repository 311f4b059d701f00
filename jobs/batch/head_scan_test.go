package batch

import (
	"context"
	"fmt"
	"strings"
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
	stager, err := NewStager(db.Client(t), Config{})
	require.NoError(t, err)
	const streams, perStream = 5, 4000
	for s := range streams {
		payloads := make([][]byte, perStream)
		for i := range payloads {
			payloads[i] = []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 150)))
		}
		require.NoError(t, stager.Stage(ctx, fmt.Sprintf("s%d", s), payloads...))
	}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"due":   {dueSQL, []any{"s1", 3000}},
		"claim": {measureClaimSQL, []any{"s1", 3000, int64(1 << 30)}},
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
