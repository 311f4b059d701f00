package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/queue"
)

func TestOverview(t *testing.T) {
	t.Parallel()

	t.Run("CountsAreCappedThenEstimated", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{CountCap: 3})
		for range 5 {
			insertJob(t, bundle.db, "k", "default", "completed")
		}
		for range 2 {
			insertJob(t, bundle.db, "k", "small", "available")
		}
		for range 4 {
			insertJob(t, bundle.db, "k", "big", "available")
		}
		insertJob(t, bundle.db, "k", "small", "retryable")

		ov, err := srv.Overview(context.Background())
		require.NoError(t, err)
		states := map[string]queue.Count{}
		for _, s := range ov.States {
			states[s.State] = s.Count
		}
		require.Len(t, states, 8)
		require.True(t, states["completed"].Approximate, "5 completed > cap 3")
		require.GreaterOrEqual(t, states["completed"].N, int64(3))
		require.True(t, states["available"].Approximate)
		require.Equal(t, queue.Count{N: 1}, states["retryable"])
		require.Equal(t, queue.Count{N: 0}, states["running"])

		require.Len(t, ov.Queues, 2)
		require.Equal(t, "big", ov.Queues[0].Queue)
		require.True(t, ov.Queues[0].States["available"].Approximate)
		require.Equal(t, "small", ov.Queues[1].Queue)
		require.Equal(t, queue.Count{N: 2}, ov.Queues[1].States["available"])
		require.Equal(t, queue.Count{N: 1}, ov.Queues[1].States["retryable"])

		// insertJob makes available jobs runnable a minute ago.
		require.NotNil(t, ov.OldestAvailableAt)
		require.InDelta(t, 60, ov.OldestAvailableAgeSeconds, 30)

		require.Len(t, ov.Throughput, 15)
		var completed int64
		for _, p := range ov.Throughput {
			completed += p.Completed
		}
		require.Equal(t, int64(5), completed)

		res := get(t, bundle.http.URL, "/")
		require.Equal(t, 200, res.status)
		require.Contains(t, res.body, "≈", "approximate counts are marked")
		require.Contains(t, res.body, `href="/jobs?queue=small"`)
	})

	t.Run("EmptySchema", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		res := get(t, bundle.http.URL, "/api/overview")
		require.Equal(t, 200, res.status, res.body)
		var ov Overview
		res.json(t, &ov)
		require.Empty(t, ov.Queues)
		require.Nil(t, ov.OldestAvailableAt)
		require.Equal(t, 200, get(t, bundle.http.URL, "/").status)
		require.Equal(t, 200, get(t, bundle.http.URL, "/api/").status)
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{})
	res := get(t, bundle.http.URL, "/healthz")
	require.Equal(t, 200, res.status)
	res = get(t, bundle.http.URL, "/readyz")
	require.Equal(t, 200, res.status, res.body)

	// Roll one of tributary's migrations back in the record only: the schema
	// now has a pending migration and the dashboard is not ready.
	_, err := bundle.db.Pool.Exec(context.Background(), bundle.db.Q(
		`DELETE FROM /*schema*/tributary_migration WHERE version = (SELECT max(version) FROM /*schema*/tributary_migration)`))
	require.NoError(t, err)
	res = get(t, bundle.http.URL, "/readyz")
	require.Equal(t, 503, res.status)
	require.Contains(t, res.body, "pending migrations")
}

func TestFeaturePagesWithoutTheirTables(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{})
	_, err := bundle.db.Pool.Exec(context.Background(), bundle.db.Q(
		`DROP TABLE IF EXISTS /*schema*/tributary_schedule, /*schema*/tributary_outbox, /*schema*/tributary_batch_object, /*schema*/tributary_batch_chunk CASCADE`))
	require.NoError(t, err)
	for _, path := range []string{"/outbox", "/schedules", "/batches", "/amqp"} {
		res := get(t, bundle.http.URL, "/api"+path)
		require.Equal(t, 200, res.status, path+": "+res.body)
		var ne notEnabled
		res.json(t, &ne)
		require.False(t, ne.Enabled, path)
		require.NotEmpty(t, ne.Reason, path)
		page := get(t, bundle.http.URL, path)
		require.Equal(t, 200, page.status, path)
		require.Contains(t, page.body, "Not enabled", path)
	}
	// Metrics still answer without the outbox.
	res := get(t, bundle.http.URL, "/metrics")
	require.Equal(t, 200, res.status)
	require.Contains(t, res.body, "tributary_dashboard_scrape_error 0")
	require.NotContains(t, res.body, "tributary_outbox_rows")
}

func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	srv, _ := setupServer(t, Config{})
	svc := NewService("127.0.0.1:0", srv.Handler(), nil)
	require.NoError(t, svc.Start(context.Background()))
	require.Error(t, svc.Start(context.Background()), "a second start fails")
	res := get(t, "http://"+svc.Addr(), "/healthz")
	require.Equal(t, 200, res.status)

	// A taken port fails the start instead of logging later.
	other := NewService(svc.Addr(), srv.Handler(), nil)
	require.ErrorContains(t, other.Start(context.Background()), "error listening on "+svc.Addr())

	require.NoError(t, svc.Stop(context.Background()))
	require.NoError(t, svc.Stop(context.Background()), "stop is idempotent")
}

// TestReadTxSettings: the dashboard's reads run in queue.ReadTx (whose
// settings TestReadTx checks) under its QueryTimeout.
func TestReadTxSettings(t *testing.T) {
	t.Parallel()
	srv, _ := setupServer(t, Config{QueryTimeout: 3 * time.Second})
	err := srv.readTx(context.Background(), func(tx pgx.Tx) error {
		var got string
		require.NoError(t, tx.QueryRow(context.Background(), "SELECT current_setting('statement_timeout')").Scan(&got))
		require.Equal(t, "3s", got)
		return nil
	})
	require.NoError(t, err)
}
