package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestCLIOutboxReplayFailed: `outbox replay --failed` over more than one
// batch prints the true count on stdout (as before), its progress on
// stderr, and exits 0.
func TestCLIOutboxReplayFailed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), db.Q(`
        INSERT INTO /*schema*/tributary_outbox (id, event_type, event_version, event_kind, payload, metadata,
            source_service, status, retry_count, last_error, created_at, failed_at)
        SELECT gen_random_uuid(), 'demo.note', 1, 'domain', '{"text":"x"}', '{}', 'test', 'FAILED', 10, 'broker down', now(), now()
        FROM generate_series(1, 2500)`))
	require.NoError(t, err)

	res := cli(t, db, nil, "outbox", "replay", "--failed")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "replayed 2500 outbox row(s)\n", res.stdout)
	require.Contains(t, res.stderr, "replayed 1000 FAILED outbox row(s) so far")
	require.Contains(t, res.stderr, "replayed 2000 FAILED outbox row(s) so far")

	res = cli(t, db, nil, "outbox", "replay", "--failed", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var out map[string]int
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Equal(t, map[string]int{"replayed": 0}, out)
}
