package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

func TestReadJobStats(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db *pgtest.DB
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		insert := func(q, state string, n int) {
			now := time.Now()
			var finalized *time.Time
			if state == "completed" || state == "discarded" || state == "cancelled" {
				finalized = &now
			}
			_, err := db.Pool.Exec(context.Background(), db.Q(`
                INSERT INTO /*schema*/river_job (state, attempt, max_attempts, kind, queue, args, created_at, scheduled_at, finalized_at, priority)
                SELECT $1::/*schema*/river_job_state, 0, 25, 'k', $2, '{}', $3, $3, $4, 1 FROM generate_series(1, $5)`),
				state, q, now.Add(-time.Minute), finalized, n)
			require.NoError(t, err)
		}
		insert("default", "completed", 5)
		insert("other", "completed", 2)
		insert("default", "available", 4)
		insert("other", "retryable", 1)
		return &testBundle{db: db}
	}
	read := func(t *testing.T, db *pgtest.DB, p queue.JobStatsParams) *queue.JobStats {
		t.Helper()
		var st *queue.JobStats
		err := queue.ReadTx(context.Background(), db.Pool, 0, func(tx pgx.Tx) error {
			var err error
			st, err = queue.ReadJobStats(context.Background(), tx, db.Schema, p)
			return err
		})
		require.NoError(t, err)
		return st
	}
	states := func(st *queue.JobStats) map[string]queue.Count {
		m := map[string]queue.Count{}
		for _, sc := range st.States {
			m[sc.State] = sc.Count
		}
		return m
	}

	t.Run("ExactEveryStateByQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st := read(t, b.db, queue.JobStatsParams{QueueStates: queue.JobStates()})
		require.Equal(t, queue.JobStates(), func() []string {
			var order []string
			for _, sc := range st.States {
				order = append(order, sc.State)
			}
			return order
		}())
		got := states(st)
		require.Equal(t, queue.Count{N: 7}, got["completed"])
		require.Equal(t, queue.Count{N: 4}, got["available"])
		require.Equal(t, queue.Count{N: 0}, got["running"])
		require.Len(t, st.Queues, 2)
		require.Equal(t, "default", st.Queues[0].Queue)
		require.Equal(t, queue.Count{N: 5}, st.Queues[0].States["completed"])
		require.Equal(t, queue.Count{N: 2}, st.Queues[1].States["completed"])
		require.NotNil(t, st.OldestAvailableAt)
		require.InDelta(t, 60, st.OldestAvailableAgeSeconds, 30)
	})

	t.Run("CappedLiveStatesByQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st := read(t, b.db, queue.JobStatsParams{CountCap: 3})
		got := states(st)
		require.True(t, got["completed"].Approximate, "7 completed > cap 3")
		require.GreaterOrEqual(t, got["completed"].N, int64(3))
		require.True(t, got["available"].Approximate)
		require.Equal(t, queue.Count{N: 1}, got["retryable"])
		require.Len(t, st.Queues, 2)
		require.NotContains(t, st.Queues[0].States, "completed", "finished jobs are counted in total only")
		require.Equal(t, queue.Count{N: 1}, st.Queues[1].States["retryable"])
	})
}

func TestReadTx(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for timeout, want := range map[time.Duration]string{0: "0", 3 * time.Second: "3s"} {
		err := queue.ReadTx(context.Background(), db.Pool, timeout, func(tx pgx.Tx) error {
			for setting, want := range map[string]string{
				"jit":                   "off",
				"plan_cache_mode":       "force_custom_plan",
				"statement_timeout":     want,
				"transaction_read_only": "on",
			} {
				var got string
				require.NoError(t, tx.QueryRow(context.Background(), "SELECT current_setting($1)", setting).Scan(&got))
				require.Equal(t, want, got, setting)
			}
			return nil
		})
		require.NoError(t, err)
	}
	err := queue.ReadTx(context.Background(), db.Pool, 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), db.Q("DELETE FROM /*schema*/river_job"))
		return err
	})
	require.ErrorContains(t, err, "read-only transaction")
}
