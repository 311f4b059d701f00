package events

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/outbox"
)

// completerFixture is a dispatcher on a fresh schema with lanes a and b of
// consumer c at head 1 and last_seq last, and a River client to insert
// their jobs.
func completerFixture(t *testing.T, last int64) (*pgtest.DB, *Dispatcher, *river.Client[pgx.Tx]) {
	t.Helper()
	db := pgtest.New(t)
	d, err := NewDispatcher(db.Pool, DispatcherConfig{Schema: db.Schema, LaneRepairInterval: -1})
	require.NoError(t, err)
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), db.Q(`INSERT INTO /*schema*/tributary_event_lane (consumer, aggregate_id, head_seq, last_seq, updated_at)
VALUES ('c', 'a', 1, $1, now()), ('c', 'b', 1, $1, now())`), last)
	require.NoError(t, err)
	return db, d, inserter
}

// TestGroupCommitFailureRollsBack: a group commit in which one job is no
// longer running at its attempt commits nothing of the batch; each
// completion is then retried alone, so the others complete and their lanes
// move, and the stale one's lane stays where it was.
func TestGroupCommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	db, d, inserter := completerFixture(t, 2)
	ctx := context.Background()
	insert := func(agg string, seq int64, pending bool) int64 {
		res, err := inserter.Insert(ctx, dispatchArgs{Consumer: "c", AggregateID: agg, Seq: seq, Event: outbox.Event{AggregateID: agg}},
			&river.InsertOpts{Pending: pending})
		require.NoError(t, err)
		return res.Job.ID
	}
	a1, a2, b1, b2 := insert("a", 1, false), insert("a", 2, true), insert("b", 1, false), insert("b", 2, true)
	_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'running', attempt = 1 WHERE id = ANY($1)`), []int64{a1, b1})
	require.NoError(t, err)

	run := func(agg string, id int64, attempt int) *laneCompletion {
		return &laneCompletion{ctx: ctx, place: riverjob.LaneSeq{Consumer: "c", AggregateID: agg, Seq: 1}, next: 2,
			attempts: []riverjob.Attempt{{ID: id, Attempt: attempt}}, done: make(chan error, 1)}
	}
	ok, stale := run("a", a1, 1), run("b", b1, 2)
	d.completer.commit([]*laneCompletion{stale, ok}, nil)
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

// TestGroupCommitStuckLaneDelaysOthersBriefly: one committer runs while
// transactions finish; a transaction stuck on a lane's lock (held here by
// another transaction) holds the others back only until a second committer
// starts (laneCompleterStallAfter), which commits them.
func TestGroupCommitStuckLaneDelaysOthersBriefly(t *testing.T) {
	t.Parallel()
	db, d, inserter := completerFixture(t, 1)
	ctx := context.Background()
	running := func(agg string) int64 {
		res, err := inserter.Insert(ctx, dispatchArgs{Consumer: "c", AggregateID: agg, Seq: 1, Event: outbox.Event{AggregateID: agg}}, nil)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'running', attempt = 1 WHERE id = $1`), res.Job.ID)
		require.NoError(t, err)
		return res.Job.ID
	}
	a1, b1 := running("a"), running("b")

	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, db.Q(`SELECT 1 FROM /*schema*/tributary_event_lane WHERE consumer = 'c' AND aggregate_id = 'a' FOR UPDATE`))
	require.NoError(t, err)

	run := func(agg string, id int64) *laneCompletion {
		return &laneCompletion{ctx: ctx, place: riverjob.LaneSeq{Consumer: "c", AggregateID: agg, Seq: 1}, next: 2,
			attempts: []riverjob.Attempt{{ID: id, Attempt: 1}}, done: make(chan error, 1), wait: true}
	}
	stuck := run("a", a1)
	stuckErr := make(chan error, 1)
	go func() { stuckErr <- d.completer.submit(stuck) }()
	// The first committer waits for lane a's lock.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%tributary_event_lane%'`, db.Schema).Scan(&n))
		return n > 0
	}, 10*time.Second, 10*time.Millisecond)

	other := run("b", b1)
	require.NoError(t, d.completer.submit(other), "lane b's completion commits while lane a's waits")
	select {
	case err := <-stuckErr:
		t.Fatalf("lane a's completion returned (%v) while its lane was locked", err)
	default:
	}
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-stuckErr)
	var heads []int64
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT array_agg(head_seq ORDER BY aggregate_id) FROM /*schema*/tributary_event_lane`)).Scan(&heads))
	require.Equal(t, []int64{2, 2}, heads)
}

// TestGroupCommitterCount: a second committer starts only when none
// finished a transaction for laneCompleterStallAfter, and never more than
// laneCompleterMaxCommitters.
func TestGroupCommitterCount(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := &laneCompleter{}
	require.True(t, c.needCommitter(now), "none runs")
	require.Equal(t, now, c.progress)
	c.committers = 1
	require.False(t, c.needCommitter(now.Add(laneCompleterStallAfter-time.Millisecond)), "the one running finished a transaction lately")
	require.True(t, c.needCommitter(now.Add(laneCompleterStallAfter)), "the one running is stuck")
	c.committers = laneCompleterMaxCommitters
	require.False(t, c.needCommitter(now.Add(time.Hour)), "at the limit")
}

// TestGroupCommitRegathersReleasedChains: after a batch commits, its
// committer waits for the chains whose steps it released and that go on
// (more claimed events in hand, or a claim that found some) before it takes
// the next batch, so a few busy lanes share each transaction instead of
// splitting into groups that take turns; it waits for nothing after a batch
// of lone completions or of chains that ended, nor while a full batch
// waits.
func TestGroupCommitRegathersReleasedChains(t *testing.T) {
	t.Parallel()
	step := func(keep bool, claimed int) *laneCompletion {
		return &laneCompletion{keep: keep, claimed: make([]riverjob.Claimed, claimed), done: make(chan error, 1)}
	}
	gathering := func(c *laneCompleter) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.gather != nil
	}
	// A bound no test run reaches: only the chains' steps end the wait.
	c := &laneCompleter{gatherFor: time.Hour, committers: 1, progress: time.Now()}
	require.False(t, c.enqueue(step(false, 0)), "a committer runs already")
	// Two of the batch's three chains go on; one completion waited before
	// the batch's were released.
	batch := []*laneCompletion{step(true, 0), step(false, 2), step(false, 0)}
	done := make(chan struct{})
	go func() {
		c.regather(batch, 1)
		close(done)
	}()
	require.Eventually(t, func() bool { return gathering(c) }, 10*time.Second, time.Millisecond)
	c.enqueue(step(true, 0))
	require.True(t, gathering(c), "one of the two chains is back")
	select {
	case <-done:
		t.Fatal("the committer stopped waiting before both chains were back")
	default:
	}
	c.enqueue(step(false, 0))
	require.False(t, gathering(c), "both chains are back")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the committer still waits with both chains back")
	}

	// Nothing to wait for: each call returns at once, which the hour's
	// bound would show as a hang.
	quick := &laneCompleter{gatherFor: time.Hour}
	quick.regather([]*laneCompletion{step(false, 0), step(false, 0)}, 0)
	full := make([]*laneCompletion, laneCompleterMaxBatch)
	for i := range full {
		full[i] = step(true, 0)
	}
	quick.regather(full[:1], laneCompleterMaxBatch)
	require.False(t, gathering(quick))
}
