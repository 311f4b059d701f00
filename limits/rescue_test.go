package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/limits"
)

// TestRescuedJob: liveness takes a running job back from a process taken
// for dead (the sweep's own statement). A job of a concurrency limit goes
// straight back to available: it held its slot and keeps it. A job of a
// rate limit goes to pending and waits for admission, which counts its
// first start: going back to available, it would start again outside the
// rate (TestChaosLimitsSIGKILL saw a one-second window of 92 under a rate
// of 50 that way).
func TestRescuedJob(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		limit limits.Limit
		want  string
	}{
		{"ConcurrencyKeepsItsSlot", limits.Limit{Name: "one", Kind: "limits_test_keyed", Max: 1}, "available"},
		{"RateWaitsForAdmission", limits.Limit{Name: "hourly", Kind: "limits_test_keyed", Rate: 1, Period: time.Hour}, "pending"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, b := setup(t, tt.limit)
			ctx := context.Background()
			res, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
			require.NoError(t, err)
			require.NoError(t, b.rt.Start(ctx))
			t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })
			t.Cleanup(func() { close(b.worker.gate) }) // first: the job returns, and Stop need not cancel it
			pgtest.WaitFor(t, 30*time.Second, "the job running", func() (bool, error) {
				return gjson(t, b, res.Job.ID, `state::text`) == "running", nil
			})

			tx, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			owner := gjson(t, b, res.Job.ID, `attempted_by[cardinality(attempted_by)]`)
			rescued, err := riverjob.RescueRunning(ctx, tx, b.db.Schema, []riverjob.Process{{ID: owner}}, 10, "taken for dead by the test")
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Len(t, rescued, 1)
			require.Equal(t, tt.want, string(rescued[0].State))

			if tt.limit.Rate > 0 {
				n, err := b.admitter.Pass(ctx, tt.limit.Name)
				require.NoError(t, err)
				require.Zero(t, n, "its first start fills the period's rate")
				require.Equal(t, "pending", gjson(t, b, res.Job.ID, `state::text`))
				require.Equal(t, "1", gjson(t, b, res.Job.ID, `attempt::text`))
			}
		})
	}
}
