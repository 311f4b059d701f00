package riverjob_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// TestWakeSnoozed wakes snoozed jobs (scheduled, or available with a
// scheduled_at ahead, as River writes a short snooze) and leaves every
// other job alone, a running one above all.
func TestWakeSnoozed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	scheduled := f.insert(t, fixtureArgs{N: 1}, &river.InsertOpts{ScheduledAt: later, Queue: "q1"})
	shortSnooze := f.insert(t, fixtureArgs{N: 2}, &river.InsertOpts{Queue: "q2"})
	_, err := f.db.Pool.Exec(ctx, f.db.Q(`UPDATE /*schema*/river_job SET scheduled_at = now() + interval '2 seconds' WHERE id = $1`), shortSnooze.ID)
	require.NoError(t, err)
	running := f.insert(t, fixtureArgs{N: 3}, nil)
	f.start(t, running.ID, "someone")
	pending := f.insert(t, fixtureArgs{N: 4}, &river.InsertOpts{Pending: true})

	woken, queues, err := riverjob.WakeSnoozed(ctx, f.db.Pool, f.db.Schema, []int64{scheduled.ID, shortSnooze.ID, running.ID, pending.ID, 999999})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{scheduled.ID, shortSnooze.ID}, woken)
	require.Equal(t, []string{"q1", "q2"}, queues)
	for _, id := range woken {
		j := f.job(t, id)
		require.Equal(t, rivertype.JobStateAvailable, j.State)
		require.False(t, j.ScheduledAt.After(time.Now().Add(time.Second)), "due now")
	}
	require.Equal(t, rivertype.JobStateRunning, f.job(t, running.ID).State)
	require.Equal(t, rivertype.JobStatePending, f.job(t, pending.ID).State)

	// WakeDue wakes only a snooze that ends by the time given, and
	// returns a due job that is available already (its queue needs the
	// notification).
	far := f.insert(t, fixtureArgs{N: 5}, &river.InsertOpts{ScheduledAt: later})
	soon := f.insert(t, fixtureArgs{N: 6}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Second)})
	due := f.insert(t, fixtureArgs{N: 7}, &river.InsertOpts{Queue: "q3"})
	woken, queues, err = riverjob.WakeDue(ctx, f.db.Pool, f.db.Schema, []int64{far.ID, soon.ID, due.ID, running.ID}, time.Now().Add(2*time.Second))
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{soon.ID, due.ID}, woken)
	require.Equal(t, []string{"default", "q3"}, queues)
	require.Equal(t, rivertype.JobStateAvailable, f.job(t, soon.ID).State)
	require.Equal(t, rivertype.JobStateScheduled, f.job(t, far.ID).State)
	require.Equal(t, rivertype.JobStateRunning, f.job(t, running.ID).State)
}
