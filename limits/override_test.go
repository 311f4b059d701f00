package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// TestSetRate: a limit declared at 100 starts a second starts a burst of
// 60 jobs in one second; overridden to 20 a second (no process restarted),
// no one-second window of the next 60 jobs' starts holds more than 20; a
// total override applies and resets the same way, and bad values are
// refused by name.
func TestSetRate(t *testing.T) {
	t.Parallel()
	const jobs = 60
	_, b := setup(t, limits.Limit{Name: "rated", Kind: "limits_test_keyed", Rate: 100})
	ctx := context.Background()
	close(b.worker.gate)
	require.NoError(t, b.rt.Start(ctx))
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })

	batch := func(customer string) []start {
		t.Helper()
		items := make([]queue.EnqueueItem, jobs)
		for i := range items {
			items[i] = queue.EnqueueItem{Args: keyedArgs{Customer: customer}}
		}
		_, err := b.rt.EnqueueMany(ctx, items)
		require.NoError(t, err)
		var starts []start
		pgtest.WaitFor(t, time.Minute, "the batch of "+customer+" completed", func() (bool, error) {
			rows, err := b.db.Pool.Query(ctx, b.db.Q(`
SELECT attempted_at FROM /*schema*/river_job WHERE state = 'completed' AND args ->> 'customer' = $1 ORDER BY attempted_at`), customer)
			if err != nil {
				return false, err
			}
			starts = starts[:0]
			for rows.Next() {
				var s start
				if err := rows.Scan(&s.at); err != nil {
					return false, err
				}
				s.weight = 1
				starts = append(starts, s)
			}
			return len(starts) == jobs, rows.Err()
		})
		return starts
	}

	declared, _ := busiestWindow(batch("before"), time.Second)
	t.Logf("declared 100/s: busiest one-second window %d of %d jobs", declared, jobs)
	require.Greater(t, declared, 20, "the declared rate let more than 20 start in a second")

	rate := 20
	require.NoError(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "rated", limits.Override{Rate: &rate}))
	st, err := limits.List(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.Equal(t, 20, st[0].Rate)
	require.Equal(t, 100, st[0].DeclaredRate)
	starts := batch("after")
	overridden, at := busiestWindow(starts, time.Second)
	t.Logf("overridden to 20/s: busiest one-second window %d (from %s), per second from the first start: %v",
		overridden, at.Format("15:04:05.000"), perPeriod(starts, time.Second))
	require.LessOrEqual(t, overridden, 20, "a one-second window held more than the override")

	require.NoError(t, limits.Reset(ctx, b.db.Pool, b.db.Schema, "rated"))
	st, err = limits.List(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.Equal(t, 100, st[0].Rate)
	require.False(t, st[0].Overridden())

	neg, zero, ms := -5, 0, time.Microsecond
	require.ErrorContains(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "rated", limits.Override{Rate: &neg}), "rate -5 must be at least 1")
	require.ErrorContains(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "rated", limits.Override{Total: &zero}), "total 0 must be at least 1")
	require.ErrorContains(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "rated", limits.Override{Period: &ms}), "period 1µs must be at least 1ms")
	require.ErrorContains(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "rated", limits.Override{Max: &neg}), "max -5 must not be negative")
	require.ErrorIs(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "nope", limits.Override{Rate: &rate}), limits.ErrUnknownLimit)
	require.ErrorIs(t, limits.Reset(ctx, b.db.Pool, b.db.Schema, "nope"), limits.ErrUnknownLimit)
}

// TestSetRateNeedsADeclaredRate: a limit without a Rate takes no rate or
// period override (migration 0029's door reads the declared rate).
func TestSetRateNeedsADeclaredRate(t *testing.T) {
	t.Parallel()
	_, b := setup(t, limits.Limit{Name: "per-customer", Kind: "limits_test_keyed", KeyArg: "customer", Max: 2})
	ctx := context.Background()
	require.NoError(t, b.admitter.Start(ctx)) // declares the limit
	t.Cleanup(func() { _ = b.admitter.Stop(context.Background()) })
	rate, period, total := 5, time.Second, 4
	require.ErrorIs(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "per-customer", limits.Override{Rate: &rate}), limits.ErrNoRate)
	require.ErrorIs(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "per-customer", limits.Override{Period: &period}), limits.ErrNoRate)
	require.NoError(t, limits.Set(ctx, b.db.Pool, b.db.Schema, "per-customer", limits.Override{Total: &total}))
	st, err := limits.List(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.Equal(t, 4, st[0].Total)
	require.Equal(t, 2, st[0].Max)
}
