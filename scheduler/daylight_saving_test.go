package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestDaylightSavingFires runs a real scheduler on real Postgres whose fake
// clock steps from one fire time to the next across both 2026 transitions
// of Europe/Berlin: a daily 02:30 runs once on each of the three days around
// a transition, never twice and never not at all.
func TestDaylightSavingFires(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name  string
		start time.Time
		want  []time.Time
	}{
		{"spring forward", utc(time.March, 27, 12, 0, 0), []time.Time{
			utc(time.March, 28, 1, 30, 0), // 02:30 CET
			utc(time.March, 29, 1, 0, 0),  // 02:30 does not exist: 03:00 CEST
			utc(time.March, 30, 0, 30, 0), // 02:30 CEST
		}},
		{"fall back", utc(time.October, 23, 12, 0, 0), []time.Time{
			utc(time.October, 24, 0, 30, 0), // 02:30 CEST
			utc(time.October, 25, 0, 30, 0), // the first 02:30 (CEST) only
			utc(time.October, 26, 1, 30, 0), // 02:30 CET
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			clock := newFakeClock(tc.start)
			s := New(db.Client(t), Config{Logger: pgtest.Logger(t), NowFunc: clock.Now})
			require.NoError(t, s.Add(Schedule{Name: "nightly", Spec: "30 2 * * *", Timezone: "Europe/Berlin", Args: noopArgs{}}))
			ctx := context.Background()
			require.NoError(t, s.Start(ctx))
			t.Cleanup(func() {
				stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				require.NoError(t, s.Stop(stopCtx))
			})

			waitNext := func(want time.Time) {
				t.Helper()
				pgtest.WaitFor(t, 10*time.Second, "next_run_at to become "+want.String(), func() (bool, error) {
					var next time.Time
					err := db.Pool.QueryRow(ctx, db.Q(`SELECT next_run_at FROM /*schema*/tributary_schedule WHERE name = $1`), "nightly").Scan(&next)
					return err == nil && next.Equal(want), err
				})
			}
			waitNext(tc.want[0])
			// Step the clock just past each fire time; the scheduler must fire
			// it and move next_run_at to the one after.
			for i, at := range tc.want {
				clock.Set(at.Add(time.Second))
				s.Wake()
				if i+1 < len(tc.want) {
					waitNext(tc.want[i+1])
				}
			}
			pgtest.WaitFor(t, 10*time.Second, "the last fire", func() (bool, error) {
				return len(firedJobs(t, db, "nightly")) == len(tc.want), nil
			})
			require.Equal(t, tc.want, fireTimes(firedJobs(t, db, "nightly")))
			_, fired, skipped, _ := scheduleRow(t, db, "nightly")
			require.EqualValues(t, len(tc.want), fired)
			require.Zero(t, skipped)
		})
	}
}
