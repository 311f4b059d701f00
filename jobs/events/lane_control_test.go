package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// blockedLanes lists the bundle's blocked lanes.
func (b *laneBundle) blockedLanes(t *testing.T) []events.BlockedLane {
	t.Helper()
	lanes, err := events.ListBlockedLanes(context.Background(), b.db.Pool, b.db.Schema, events.LaneListParams{})
	require.NoError(t, err)
	return lanes
}

// sweep makes every lane quiet and runs the repair sweep once.
func (b *laneBundle) sweep(t *testing.T) int {
	t.Helper()
	b.ageLanes(t)
	return b.inst.Dispatcher.RepairLanes(context.Background())
}

// TestLaneHeadGivenUpThroughTributary: cancelling or deleting a lane's head
// with tributary's actions moves the lane on at once, without the sweep.
func TestLaneHeadGivenUpThroughTributary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		text   string
		state  string
		action func(ctx context.Context, b *laneBundle, id int64) (*events.JobActionResult, error)
		after  string
	}{
		{"CancelRetryableHead", "fail", "retryable", func(ctx context.Context, b *laneBundle, id int64) (*events.JobActionResult, error) {
			return events.CancelJob(ctx, b.db.Client(t), id)
		}, "cancelled"},
		{"CancelRunningHead", "hang", "running", func(ctx context.Context, b *laneBundle, id int64) (*events.JobActionResult, error) {
			return events.CancelJob(ctx, b.db.Client(t), id)
		}, "cancelled"},
		{"DeleteRetryableHead", "fail", "retryable", func(ctx context.Context, b *laneBundle, id int64) (*events.JobActionResult, error) {
			return events.DeleteJob(ctx, b.db.Client(t), id)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupLanes(t, events.OrderingBlock, time.Hour)
			head := b.emit(t, "A", tc.text)
			next := b.emit(t, "A", "ok")
			headJob := b.waitJob(t, head, tc.state)
			res, err := tc.action(ctx, b, headJob)
			require.NoError(t, err)
			require.Equal(t, "lanes", res.Consumer)
			require.Equal(t, "A", res.AggregateID)
			require.Equal(t, tc.state != "running", res.LaneReleased, "a running head is released by its dispatcher")
			b.waitHandled(t, next)
			if tc.after != "" {
				b.waitJob(t, head, tc.after)
			}
			require.Equal(t, []string{next}, b.handledOrder())
		})
	}
}

// TestRetryJobKeepsLaneOrder: tributary's retry of a dispatch waiting
// behind its lane's head is refused, naming the head; a dispatch cancelled
// before its turn goes back to its place when retried.
func TestRetryJobKeepsLaneOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	client := b.db.Client(t)
	head := b.emit(t, "A", "gate")
	second := b.emit(t, "A", "ok")
	third := b.emit(t, "A", "ok")
	headJob := b.waitJob(t, head, "running")
	b.waitJob(t, third, laneEvent)
	// Jobs behind the head: an older version's, or ones put back.
	b.asPendingJobs(t, "A")
	secondJob := b.waitJob(t, second, "pending")
	thirdJob := b.waitJob(t, third, "pending")

	_, err := events.RetryJob(ctx, client, secondJob)
	var order *events.LaneOrderError
	require.ErrorAs(t, err, &order)
	require.Equal(t, headJob, order.HeadJobID)
	require.Equal(t, "running", order.HeadState)
	require.Contains(t, err.Error(), "waits behind job")
	b.waitJob(t, second, "pending")

	// Cancelled before its turn, then wanted after all.
	res, err := events.CancelJob(ctx, client, thirdJob)
	require.NoError(t, err)
	require.False(t, res.LaneReleased)
	require.Equal(t, "cancelled", string(res.Job.State))
	res, err = events.RetryJob(ctx, client, thirdJob)
	require.NoError(t, err)
	require.True(t, res.Requeued)
	require.Equal(t, "pending", string(res.Job.State))

	close(b.gate)
	b.waitHandled(t, third)
	require.Equal(t, []string{head, second, third}, b.handledOrder())
}

// TestBlockedLane: under OrderingBlock a head that used up its retries
// holds its lane, listed with the reason; the sweep leaves it alone; retry
// and skip both move it on.
func TestBlockedLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	b.failing.Store(true)
	client := b.db.Client(t)
	retried := b.emit(t, "R", "flaky")
	retriedNext := b.emit(t, "R", "ok")
	skipped := b.emit(t, "S", "flaky")
	skippedNext := b.emit(t, "S", "ok")
	retriedJob := b.waitJob(t, retried, "discarded")
	skippedJob := b.waitJob(t, skipped, "discarded")

	lanes := b.blockedLanes(t)
	require.Len(t, lanes, 2)
	for _, l := range lanes {
		require.Equal(t, "lanes", l.Consumer)
		require.Equal(t, "discarded", l.JobState)
		require.Contains(t, l.Reason, "downstream is flaky")
		require.Equal(t, int64(1), l.Waiting)
		require.Contains(t, []int64{retriedJob, skippedJob}, l.JobID)
		require.Contains(t, l.String(), "aggregate "+l.AggregateID+" of consumer lanes blocked by job")
	}
	require.Zero(t, b.sweep(t), "the sweep holds a blocked lane")
	require.Len(t, b.blockedLanes(t), 2)
	require.Empty(t, b.handledOrder())

	_, err := events.SkipLane(ctx, client, "lanes", "A")
	require.ErrorIs(t, err, events.ErrLaneNotBlocked)
	_, err = events.RetryLane(ctx, client, "nobody", "R")
	require.ErrorIs(t, err, events.ErrUnknownConsumer)

	b.failing.Store(false)
	res, err := events.RetryLane(ctx, client, "lanes", "R")
	require.NoError(t, err)
	require.Equal(t, retriedJob, res.Job.ID)
	res, err = events.SkipLane(ctx, client, "lanes", "S")
	require.NoError(t, err)
	require.True(t, res.LaneReleased)
	b.waitHandled(t, retriedNext)
	b.waitHandled(t, skippedNext)
	require.Equal(t, []string{retried, retriedNext}, filterIDs(b.handledOrder(), retried, retriedNext))
	require.NotContains(t, b.handledOrder(), skipped)
	require.Empty(t, b.blockedLanes(t))

	// The skipped event stays replayable: it runs now, out of order.
	b.waitJob(t, skipped, "discarded")
	_, err = events.RetryJob(ctx, client, skippedJob)
	require.NoError(t, err)
	b.waitHandled(t, skipped)
}

// TestValidationFailureBlocksUntilSkipped: a validation failure under
// OrderingBlock (the dispatcher's own cancel, not an operator's) holds the
// lane visibly; the sweep does not take it for an operator's cancel; skip
// is the way forward.
func TestValidationFailureBlocksUntilSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	bad := b.emitInvalid(t, "V")
	next := b.emit(t, "V", "ok")
	badJob := b.waitJob(t, bad, "cancelled")

	var lanes []events.BlockedLane
	require.Eventually(t, func() bool { lanes = b.blockedLanes(t); return len(lanes) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, badJob, lanes[0].JobID)
	require.Equal(t, "cancelled", lanes[0].JobState)
	require.Contains(t, lanes[0].Reason, "amount must not be negative")
	require.Zero(t, b.sweep(t))
	require.Len(t, b.blockedLanes(t), 1)
	require.Empty(t, b.handledOrder())

	// A retry cannot help: the payload fails validation again, and the
	// lane holds again.
	res, err := events.RetryJob(ctx, b.db.Client(t), badJob)
	require.NoError(t, err)
	require.Equal(t, "available", string(res.Job.State))
	pgtest.WaitFor(t, 10*time.Second, "the retried invalid dispatch to be cancelled again", func() (bool, error) {
		var attempt int
		_ = b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT attempt FROM /*schema*/river_job WHERE id = $1 AND state = 'cancelled'`), badJob).Scan(&attempt)
		return attempt == 2, nil
	})
	require.Eventually(t, func() bool { return len(b.blockedLanes(t)) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, b.handledOrder())

	_, err = events.SkipLane(ctx, b.db.Client(t), "lanes", "V")
	require.NoError(t, err)
	b.waitHandled(t, next)
}

// TestBlockedHeadDeletedByRetention: River's retention deletes a blocked
// head; the lane keeps holding (listed as gone), and a retry of the deleted
// job puts its event back from the lane's copy, in order.
func TestBlockedHeadDeletedByRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	b.failing.Store(true)
	client := b.db.Client(t)
	head := b.emit(t, "A", "flaky")
	next := b.emit(t, "A", "ok")
	headJob := b.waitJob(t, head, "discarded")
	require.Eventually(t, func() bool { return len(b.blockedLanes(t)) == 1 }, 10*time.Second, 20*time.Millisecond)

	// What River's job cleaner does to a discarded job past its retention.
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`DELETE FROM /*schema*/river_job WHERE id = $1`), headJob)
	require.NoError(t, err)
	require.Zero(t, b.sweep(t), "a blocked lane keeps holding after its job is gone")
	lanes := b.blockedLanes(t)
	require.Len(t, lanes, 1)
	require.Equal(t, "gone", lanes[0].JobState)
	require.Equal(t, headJob, lanes[0].JobID)

	_, err = events.CancelJob(ctx, client, headJob)
	require.ErrorIs(t, err, events.ErrBlockingJobGone)
	_, err = events.RetryJob(ctx, client, 999_999_999)
	require.ErrorIs(t, err, river.ErrNotFound)

	b.failing.Store(false)
	res, err := events.RetryJob(ctx, client, headJob)
	require.NoError(t, err)
	require.Equal(t, headJob, res.ReinsertedFrom)
	require.NotEqual(t, headJob, res.Job.ID)
	b.waitHandled(t, next)
	require.Equal(t, []string{head, next}, b.handledOrder())
	require.Empty(t, b.blockedLanes(t))
}

func filterIDs(ids []string, keep ...string) []string {
	var out []string
	for _, id := range ids {
		for _, k := range keep {
			if id == k {
				out = append(out, id)
			}
		}
	}
	return out
}
