package events

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/outbox"
)

// TestGroupCommitFailureRollsBack: a group commit in which one job is no
// longer running at its attempt commits nothing of the batch; each
// completion is then retried alone, so the others complete and their lanes
// move, and the stale one's lane stays where it was.
func TestGroupCommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d, err := NewDispatcher(db.Pool, DispatcherConfig{Schema: db.Schema, LaneRepairInterval: -1})
	require.NoError(t, err)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_event_lane (consumer, aggregate_id, head_seq, last_seq, updated_at)
VALUES ('c', 'a', 1, 2, now()), ('c', 'b', 1, 2, now())`))
	require.NoError(t, err)
	insert := func(agg string, seq int64, pending bool) int64 {
		res, err := inserter.Insert(ctx, dispatchArgs{Consumer: "c", AggregateID: agg, Seq: seq, Event: outbox.Event{AggregateID: agg}},
			&river.InsertOpts{Pending: pending})
		require.NoError(t, err)
		return res.Job.ID
	}
	a1, a2, b1, b2 := insert("a", 1, false), insert("a", 2, true), insert("b", 1, false), insert("b", 2, true)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'running', attempt = 1 WHERE id = ANY($1)`), []int64{a1, b1})
	require.NoError(t, err)

	run := func(agg string, id int64, attempt int) *laneCompletion {
		return &laneCompletion{ctx: ctx, place: riverjob.LaneSeq{Consumer: "c", AggregateID: agg, Seq: 1}, next: 2,
			attempts: []riverjob.Attempt{{ID: id, Attempt: attempt}}, done: make(chan error, 1)}
	}
	ok, stale := run("a", a1, 1), run("b", b1, 2)
	d.completer.commit([]*laneCompletion{stale, ok})
	require.NoError(t, <-ok.done)
	require.ErrorContains(t, <-stale.done, "only 0 of 1 dispatch jobs were still running")

	state := func(id int64) rivertype.JobState {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT state::text FROM /*schema*/river_job WHERE id = $1`), id).Scan(&s))
		return rivertype.JobState(s)
	}
	head := func(agg string) int64 {
		var h int64
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT head_seq FROM /*schema*/tributary_event_lane WHERE consumer = 'c' AND aggregate_id = $1`), agg).Scan(&h))
		return h
	}
	require.Equal(t, rivertype.JobStateCompleted, state(a1))
	require.Equal(t, rivertype.JobStateAvailable, state(a2))
	require.Equal(t, int64(2), head("a"))
	require.Equal(t, rivertype.JobStateRunning, state(b1))
	require.Equal(t, rivertype.JobStatePending, state(b2))
	require.Equal(t, int64(1), head("b"), "the failed batch's advance of lane b was rolled back")
}
