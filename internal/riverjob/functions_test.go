package riverjob_test

// Each test runs riverjob's functions against a schema migrated with River's
// migrations at the pinned version (and tributary's), and reads the result
// back through River's own API where it has one, so the statements write
// what River itself would.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/riverjob"
)

func TestJobStatesAndCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	avail := f.insert(t, fixtureArgs{N: 1}, nil)
	pending := f.insert(t, fixtureArgs{N: 2}, &river.InsertOpts{Pending: true})
	done := f.insert(t, fixtureArgs{N: 3}, nil)
	f.finalize(t, done.ID, rivertype.JobStateCompleted)

	state, err := riverjob.JobState(ctx, f.db.Pool, f.db.Schema, pending.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStatePending, state)
	state, err = riverjob.JobState(ctx, f.db.Pool, f.db.Schema, 999999)
	require.NoError(t, err)
	require.Empty(t, state, "a job that does not exist has no state")

	id := func(id int64) int64 { return id }
	states, err := riverjob.JobStates(ctx, f.db.Pool, f.db.Schema, []int64{avail.ID, pending.ID, done.ID, 999999}, id)
	require.NoError(t, err)
	require.Equal(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateCompleted, ""}, states,
		"in the items' order, empty for a job that does not exist")
	states, err = riverjob.JobStates(ctx, f.db.Pool, f.db.Schema, nil, id)
	require.NoError(t, err)
	require.Empty(t, states)

	n, err := riverjob.CountJobs(ctx, f.db.Pool, f.db.Schema)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = riverjob.CountJobs(ctx, f.db.Pool, f.db.Schema, rivertype.JobStateAvailable, rivertype.JobStateCompleted)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	for _, s := range []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled} {
		require.True(t, riverjob.Finalized(s), s)
	}
	for _, s := range []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled, ""} {
		require.False(t, riverjob.Finalized(s), s)
	}
}

func TestLockJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	job := f.insert(t, fixtureArgs{N: 1}, nil)

	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, riverjob.LockJob(ctx, tx, f.db.Schema, job.ID))
	require.NoError(t, riverjob.LockJob(ctx, tx, f.db.Schema, 999999), "a missing job locks nothing")

	// Another transaction cannot take the row while tx holds it.
	err = pgx.BeginFunc(ctx, f.db.Pool, func(other pgx.Tx) error {
		var locked bool
		err := other.QueryRow(ctx, f.db.Q(`SELECT count(*) = 0 FROM (
            SELECT 1 FROM /*schema*/river_job WHERE id = $1 FOR UPDATE SKIP LOCKED) s`), job.ID).Scan(&locked)
		require.True(t, locked, "the row is locked by the other transaction")
		return err
	})
	require.NoError(t, err)
}

func TestFireJobID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	job := f.insert(t, fixtureArgs{N: 1}, &river.InsertOpts{Metadata: []byte(`{"` + riverjob.ScheduleKey + `": "nightly", "` +
		riverjob.FireAtKey + `": "` + fixtureTime(2) + `"}`)})

	id, found, err := riverjob.FireJobID(ctx, f.db.Pool, f.db.Schema, "nightly", fixtureTime(2))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, job.ID, id)
	_, found, err = riverjob.FireJobID(ctx, f.db.Pool, f.db.Schema, "nightly", fixtureTime(3))
	require.NoError(t, err)
	require.False(t, found)

	// The statement is the one migration 0003's unique index serves.
	require.Contains(t, f.explain(t, "fireJobSQL", "a", "b"), "river_job_tributary_schedule_fire")
}

func TestCountByQueueState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	f.insert(t, fixtureArgs{N: 1}, &river.InsertOpts{Queue: "a"})
	f.insert(t, fixtureArgs{N: 2}, &river.InsertOpts{Queue: "a"})
	f.insert(t, fixtureArgs{N: 3}, &river.InsertOpts{Queue: "b", Pending: true})

	counts, err := riverjob.CountByQueueState(ctx, f.db.Pool, f.db.Schema)
	require.NoError(t, err)
	require.Equal(t, []riverjob.QueueStateCount{
		{Queue: "a", State: "available", Count: 2},
		{Queue: "b", State: "pending", Count: 1},
	}, counts)
}

func TestCopyJobsAndVacuum(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	rows := [][]any{
		{"completed", int16(1), int16(25), now, now, now, now, int16(1), []byte(`{}`), "k", []byte(`{}`), "default", []string{}},
		{"available", int16(0), int16(25), nil, now, nil, now, int16(2), []byte(`{}`), "k", []byte(`{}`), "default", []string{}},
	}
	n, err := riverjob.CopyJobs(ctx, f.db.Pool, f.db.Schema, []string{"state", "attempt", "max_attempts", "attempted_at", "created_at",
		"finalized_at", "scheduled_at", "priority", "args", "kind", "metadata", "queue", "tags"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, riverjob.VacuumAnalyze(ctx, f.db.Pool, f.db.Schema))
	count, err := riverjob.CountJobs(ctx, f.db.Pool, f.db.Schema, rivertype.JobStateCompleted)
	require.NoError(t, err)
	require.EqualValues(t, 1, count)
}

func TestRescueRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	again := f.insert(t, fixtureArgs{N: 1}, &river.InsertOpts{Queue: "q1"})
	last := f.insert(t, fixtureArgs{N: 2}, &river.InsertOpts{Queue: "q2", MaxAttempts: 1})
	cancelled := f.insert(t, fixtureArgs{N: 3}, &river.InsertOpts{Queue: "q3", Metadata: []byte(`{"` + riverjob.CancelAttemptedKey + `": "` + fixtureTime(1) + `"}`)})
	unknown := f.insert(t, fixtureArgs{N: 4}, nil)
	other := f.insert(t, fixtureArgs{N: 5}, nil)
	waiting := f.insert(t, fixtureArgs{N: 6}, nil)
	for _, id := range []int64{again.ID, last.ID, cancelled.ID} {
		f.start(t, id, "dead-1")
	}
	f.start(t, unknown.ID, "dead-2")
	f.start(t, other.ID, "alive")

	beat := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	procs := []riverjob.Process{{ID: "dead-1", Hostname: "host-1", PID: 42, HeartbeatAt: &beat}, {ID: "dead-2"}}
	var got []riverjob.Rescued
	require.NoError(t, pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
		first, err := riverjob.RescueRunning(ctx, tx, f.db.Schema, procs, 3, "process died")
		require.Len(t, first, 3, "at most the limit per call")
		got = append(got, first...)
		rest, err2 := riverjob.RescueRunning(ctx, tx, f.db.Schema, procs, 3, "process died")
		got = append(got, rest...)
		none, err3 := riverjob.RescueRunning(ctx, tx, f.db.Schema, procs, 3, "process died")
		require.Empty(t, none)
		require.NoError(t, err2)
		require.NoError(t, err3)
		return err
	}))
	require.ElementsMatch(t, []riverjob.Rescued{
		{Queue: "q1", State: rivertype.JobStateAvailable},
		{Queue: "q2", State: rivertype.JobStateDiscarded},
		{Queue: "q3", State: rivertype.JobStateCancelled},
		{Queue: river.QueueDefault, State: rivertype.JobStateAvailable},
	}, got)

	j := f.job(t, again.ID)
	require.Equal(t, rivertype.JobStateAvailable, j.State)
	require.Equal(t, 1, j.Attempt, "the attempt River counted stays counted")
	require.Nil(t, j.FinalizedAt)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Error, "process died: process dead-1 (host host-1, pid 42, last heartbeat "+beat.Format(time.DateOnly))
	require.Equal(t, 1, j.Errors[0].Attempt)
	require.EqualValues(t, 1, metadata(t, j)["river:rescue_count"])
	require.NotNil(t, f.job(t, last.ID).FinalizedAt)
	require.NotNil(t, f.job(t, cancelled.ID).FinalizedAt)
	require.Contains(t, f.job(t, unknown.ID).Errors[0].Error, "process dead-2 (host ?, pid ?, last heartbeat ?)")
	require.Equal(t, rivertype.JobStateRunning, f.job(t, other.ID).State, "a live process's job is left alone")
	require.Equal(t, rivertype.JobStateAvailable, f.job(t, waiting.ID).State)
	require.Empty(t, f.job(t, waiting.ID).Errors)

	f.retriedByRiver(t, last.ID)
}

func TestWakeQueues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	conn, err := f.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN "`+riverjob.InsertChannel(f.db.Schema)+`"`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), "UNLISTEN *") }()

	require.NoError(t, riverjob.Wake(ctx, f.db.Pool, f.db.Schema, []string{"b", "", "a", "b"}))
	require.NoError(t, riverjob.Wake(ctx, f.db.Pool, f.db.Schema, nil), "nothing to wake is not an error")

	var got []string
	for len(got) < 2 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, riverjob.InsertChannel(f.db.Schema), n.Channel)
		var p struct {
			Queue string `json:"queue"`
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &p), "River's producers read the payload as JSON")
		got = append(got, p.Queue)
	}
	require.Equal(t, []string{"b", "a"}, got, "each queue once, in order, empty names left out")
}

// dispatchAt inserts a dispatch-shaped job at a lane place.
func (f *fixture) dispatchAt(t *testing.T, consumer, agg string, seq int64, opts *river.InsertOpts) *rivertype.JobRow {
	t.Helper()
	return f.insert(t, fixtureArgs{KindName: riverjob.DispatchKind, Consumer: consumer, AggregateID: agg, Seq: seq}, opts)
}

// inTx runs fn in a transaction that commits.
func (f *fixture) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), f.db.Pool, fn))
}

func TestPromoteNextAndHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)

	a2 := f.dispatchAt(t, "c", "a", 2, &river.InsertOpts{Pending: true, Queue: "qa"})
	b2 := f.dispatchAt(t, "c", "b", 2, &river.InsertOpts{Pending: true, Queue: "qb"})
	a3 := f.dispatchAt(t, "c", "a", 3, &river.InsertOpts{Pending: true, Queue: "qa"})
	other := f.insert(t, fixtureArgs{Consumer: "c", AggregateID: "a", Seq: 2}, &river.InsertOpts{Pending: true})

	var queues []string
	f.inTx(t, func(tx pgx.Tx) error {
		var err error
		queues, err = riverjob.PromoteNext(ctx, tx, f.db.Schema, []riverjob.LaneSeq{
			{Consumer: "c", AggregateID: "a", Seq: 2}, {Consumer: "c", AggregateID: "b", Seq: 2}, {Consumer: "c", AggregateID: "z", Seq: 1},
		}, now)
		return err
	})
	require.ElementsMatch(t, []string{"qa", "qb"}, queues, "an idle place promotes nothing")
	for _, id := range []int64{a2.ID, b2.ID} {
		j := f.job(t, id)
		require.Equal(t, rivertype.JobStateAvailable, j.State)
		require.True(t, j.ScheduledAt.Equal(now))
		require.Equal(t, true, metadata(t, j)[riverjob.LaneTurnKey])
	}
	require.Equal(t, rivertype.JobStatePending, f.job(t, a3.ID).State, "only the place's own job")
	require.Equal(t, rivertype.JobStatePending, f.job(t, other.ID).State, "only dispatch jobs")

	f.inTx(t, func(tx pgx.Tx) error {
		q, err := riverjob.PromoteHead(ctx, tx, f.db.Schema, a3.ID, now)
		require.Equal(t, "qa", q)
		if err != nil {
			return err
		}
		q, err = riverjob.PromoteHead(ctx, tx, f.db.Schema, a3.ID, now)
		require.Empty(t, q, "a job no longer pending is left alone")
		return err
	})
	require.Equal(t, true, metadata(t, f.job(t, a3.ID))[riverjob.LaneTurnKey])
}

func TestReturnToPendingAndRequeueGivenUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()

	early := f.dispatchAt(t, "c", "a", 5, nil)
	f.start(t, early.ID, "w")
	given := f.dispatchAt(t, "c", "a", 6, &river.InsertOpts{MaxAttempts: 1})
	f.start(t, given.ID, "w")
	f.finalize(t, given.ID, rivertype.JobStateDiscarded)
	avail := f.dispatchAt(t, "c", "a", 7, nil)

	f.inTx(t, func(tx pgx.Tx) error {
		require.NoError(t, riverjob.ReturnToPending(ctx, tx, f.db.Schema, early.ID, now))
		ok, err := riverjob.RequeueGivenUp(ctx, tx, f.db.Schema, given.ID, now)
		require.True(t, ok)
		require.NoError(t, err)
		ok, err = riverjob.RequeueGivenUp(ctx, tx, f.db.Schema, avail.ID, now)
		require.False(t, ok, "a job that was not given up is not requeued")
		return err
	})
	j := f.job(t, early.ID)
	require.Equal(t, rivertype.JobStatePending, j.State)
	require.Zero(t, j.Attempt, "the attempt its start counted is given back")
	j = f.job(t, given.ID)
	require.Equal(t, rivertype.JobStatePending, j.State)
	require.Nil(t, j.FinalizedAt)
	require.Greater(t, j.MaxAttempts, j.Attempt, "an attempt is left")
}

// TestLimitedDispatchBackToPending: a limited dispatch job that goes back
// to pending to wait for its lane's turn (ReturnToPending, GiveBack,
// RequeueGivenUp) carries its limit for its release, which admission does
// not see; LaneJobsAt says which jobs carry a limit.
func TestLimitedDispatchBackToPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	limited := &river.InsertOpts{Metadata: []byte(`{"tributary_limit": "consumer:c", "tributary_limit_key": ""}`)}

	early := f.dispatchAt(t, "c", "a", 1, limited)
	f.start(t, early.ID, "w")
	lost := f.dispatchAt(t, "c", "a", 2, limited)
	f.start(t, lost.ID, "w")
	given := f.dispatchAt(t, "c", "a", 3, &river.InsertOpts{MaxAttempts: 1, Metadata: limited.Metadata})
	f.start(t, given.ID, "w")
	f.finalize(t, given.ID, rivertype.JobStateDiscarded)
	plain := f.dispatchAt(t, "c", "b", 1, nil)
	f.start(t, plain.ID, "w")

	heads, err := riverjob.LaneJobsAt(ctx, f.db.Pool, f.db.Schema, []riverjob.LaneSeq{{Consumer: "c", AggregateID: "a", Seq: 1}, {Consumer: "c", AggregateID: "b", Seq: 1}})
	require.NoError(t, err)
	require.True(t, heads[0].Limited)
	require.False(t, heads[1].Limited)

	f.inTx(t, func(tx pgx.Tx) error {
		require.NoError(t, riverjob.ReturnToPending(ctx, tx, f.db.Schema, early.ID, now))
		require.NoError(t, riverjob.ReturnToPending(ctx, tx, f.db.Schema, plain.ID, now))
		require.NoError(t, riverjob.GiveBack(ctx, tx, f.db.Schema, []riverjob.Attempt{{ID: lost.ID, Attempt: 1}}, now))
		ok, err := riverjob.RequeueGivenUp(ctx, tx, f.db.Schema, given.ID, now)
		require.True(t, ok)
		return err
	})
	for _, id := range []int64{early.ID, lost.ID, given.ID} {
		j := f.job(t, id)
		require.Equal(t, rivertype.JobStatePending, j.State)
		md := metadata(t, j)
		require.NotContains(t, md, riverjob.LimitMetaName, "job %d", id)
		require.Equal(t, "consumer:c", md[riverjob.LimitMetaOnRelease], "job %d", id)
		require.Equal(t, "", md[riverjob.LimitMetaKey], "job %d", id)
	}
	md := metadata(t, f.job(t, plain.ID))
	require.NotContains(t, md, riverjob.LimitMetaName)
	require.NotContains(t, md, riverjob.LimitMetaOnRelease)
}

func TestLaneJobsAtAndJobPlace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	old := f.dispatchAt(t, "c", "a", 1, nil)
	f.finalize(t, old.ID, rivertype.JobStateDiscarded)
	newer := f.dispatchAt(t, "c", "a", 1, &river.InsertOpts{Metadata: []byte(`{"` + riverjob.CancelAttemptedKey + `": "x"}`)})
	_, err := f.db.Pool.Exec(ctx, f.db.Q(`UPDATE /*schema*/river_job SET errors = ARRAY['{"error": "first"}'::jsonb, '{"error": "last"}'::jsonb] WHERE id = $1`), newer.ID)
	require.NoError(t, err)
	b := f.dispatchAt(t, "c", "b", 4, &river.InsertOpts{Pending: true})
	plain := f.insert(t, fixtureArgs{N: 1}, nil)

	jobs, err := riverjob.LaneJobsAt(ctx, f.db.Pool, f.db.Schema, []riverjob.LaneSeq{
		{Consumer: "c", AggregateID: "b", Seq: 4}, {Consumer: "c", AggregateID: "gone", Seq: 1}, {Consumer: "c", AggregateID: "a", Seq: 1},
	})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.Equal(t, b.ID, jobs[0].ID)
	require.Equal(t, rivertype.JobStatePending, jobs[0].State)
	require.False(t, jobs[0].CancelRequested)
	require.JSONEq(t, string(b.EncodedArgs), string(jobs[0].Args))
	require.Zero(t, jobs[1].ID, "no job at the place")
	require.Equal(t, newer.ID, jobs[2].ID, "the newest job at a place")
	require.True(t, jobs[2].CancelRequested)
	require.Equal(t, "last", jobs[2].LastError)

	one, err := riverjob.LaneJobAt(ctx, f.db.Pool, f.db.Schema, riverjob.LaneSeq{Consumer: "c", AggregateID: "b", Seq: 4})
	require.NoError(t, err)
	require.Equal(t, b.ID, one.ID)

	p, found, err := riverjob.JobPlaceOf(ctx, f.db.Pool, f.db.Schema, b.ID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, riverjob.JobPlace{Kind: riverjob.DispatchKind, State: rivertype.JobStatePending, InLane: true,
		Place: riverjob.LaneSeq{Consumer: "c", AggregateID: "b", Seq: 4}}, p)
	p, found, err = riverjob.JobPlaceOf(ctx, f.db.Pool, f.db.Schema, plain.ID)
	require.NoError(t, err)
	require.True(t, found)
	require.False(t, p.InLane)
	require.Equal(t, "riverjob.fixture", p.Kind)
	_, found, err = riverjob.JobPlaceOf(ctx, f.db.Pool, f.db.Schema, 999999)
	require.NoError(t, err)
	require.False(t, found)

	requested, err := riverjob.CancelRequested(ctx, f.db.Pool, f.db.Schema, newer.ID)
	require.NoError(t, err)
	require.True(t, requested)
	requested, err = riverjob.CancelRequested(ctx, f.db.Pool, f.db.Schema, b.ID)
	require.NoError(t, err)
	require.False(t, requested)

	// The lookups are the probes of migration 0008's lane index.
	require.Contains(t, f.explain(t, "laneJobsAtSQL", []string{"c"}, []string{"a"}, []int64{1}), "tributary_dispatch_lane_idx")
}

func TestCompleteRunningAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := f.insert(t, fixtureArgs{N: 1}, nil)
	b := f.insert(t, fixtureArgs{N: 2}, nil)
	c := f.insert(t, fixtureArgs{N: 3}, nil)
	handedOn := f.insert(t, fixtureArgs{N: 4}, nil)
	for _, id := range []int64{a.ID, b.ID, handedOn.ID} {
		f.start(t, id, "w")
	}
	f.start(t, handedOn.ID, "other") // rescued and fetched again: attempt 2

	var done []int64
	f.inTx(t, func(tx pgx.Tx) error {
		var err error
		done, err = riverjob.CompleteRunning(ctx, tx, f.db.Schema, []riverjob.Attempt{
			{ID: a.ID, Attempt: 1}, {ID: b.ID, Attempt: 1}, {ID: c.ID, Attempt: 1}, {ID: handedOn.ID, Attempt: 1},
		}, now)
		return err
	})
	require.ElementsMatch(t, []int64{a.ID, b.ID}, done, "only the attempts still running")
	for _, id := range []int64{a.ID, b.ID} {
		j := f.job(t, id)
		require.Equal(t, rivertype.JobStateCompleted, j.State)
		require.True(t, j.FinalizedAt.Equal(now))
	}
	require.Equal(t, rivertype.JobStateAvailable, f.job(t, c.ID).State)
	require.Equal(t, rivertype.JobStateRunning, f.job(t, handedOn.ID).State, "another attempt is not completed")
}

func TestInsertAttempted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	later := now.Add(time.Minute)
	args := func(n int) []byte {
		b, err := json.Marshal(fixtureArgs{N: n})
		require.NoError(t, err)
		return b
	}
	failed := &rivertype.AttemptError{At: now, Attempt: 2, Error: "boom", Trace: "stack"}
	f.inTx(t, func(tx pgx.Tx) error {
		return riverjob.InsertAttempted(ctx, tx, f.db.Schema, "q", []riverjob.AttemptedJob{
			{Kind: "k.retry", Args: args(1), State: rivertype.JobStateRetryable, Attempt: 2, MaxAttempts: 4, ScheduledAt: later, Error: failed},
			{Kind: "k.discard", Args: args(2), State: rivertype.JobStateDiscarded, Attempt: 4, MaxAttempts: 4, ScheduledAt: now, Error: failed},
			{Kind: "k.new", Args: args(3), State: rivertype.JobStateAvailable, MaxAttempts: 4, ScheduledAt: now},
		}, now)
	})

	res, err := f.client.River().JobList(ctx, river.NewJobListParams().Queues("q").States(
		rivertype.JobStateRetryable, rivertype.JobStateDiscarded, rivertype.JobStateAvailable).OrderBy(river.JobListOrderByID, river.SortOrderAsc))
	require.NoError(t, err)
	require.Len(t, res.Jobs, 3)
	retry, discard, fresh := res.Jobs[0], res.Jobs[1], res.Jobs[2]

	require.Equal(t, "k.retry", retry.Kind)
	require.Equal(t, rivertype.JobStateRetryable, retry.State)
	require.Equal(t, 2, retry.Attempt)
	require.NotNil(t, retry.AttemptedAt)
	require.Nil(t, retry.FinalizedAt)
	require.True(t, retry.ScheduledAt.Equal(later))
	require.Len(t, retry.Errors, 1, "River reads the attempt's error back")
	require.Equal(t, "boom", retry.Errors[0].Error)
	require.Equal(t, "stack", retry.Errors[0].Trace)
	require.Equal(t, 2, retry.Errors[0].Attempt)
	require.JSONEq(t, `{"n":1}`, string(retry.EncodedArgs))

	require.Equal(t, rivertype.JobStateDiscarded, discard.State)
	require.NotNil(t, discard.FinalizedAt)

	require.Equal(t, rivertype.JobStateAvailable, fresh.State)
	require.Zero(t, fresh.Attempt)
	require.Nil(t, fresh.AttemptedAt)
	require.Empty(t, fresh.Errors)

	f.retriedByRiver(t, discard.ID)
}

func TestDispatchCountsAndDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	batch := func(consumer string) fixtureArgs {
		return fixtureArgs{KindName: riverjob.DispatchBatchKind, Consumer: consumer}
	}
	for range 3 {
		f.dispatchAt(t, "c1", "a", 1, nil)
	}
	f.insert(t, batch("c1"), &river.InsertOpts{Pending: true})
	running := f.dispatchAt(t, "c1", "a", 2, nil)
	f.start(t, running.ID, "w")
	done := f.dispatchAt(t, "c1", "a", 3, nil)
	f.finalize(t, done.ID, rivertype.JobStateCompleted)
	f.insert(t, batch("c2"), nil)
	f.insert(t, fixtureArgs{Consumer: "c1"}, nil) // not a dispatch

	counts, err := riverjob.CountUnfinishedDispatches(ctx, f.db.Pool, f.db.Schema)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"c1": 5, "c2": 1}, counts)
	// The count reads migration 0014's partial index of unfinished dispatch
	// jobs, not River's state and kind indexes (a BitmapAnd that grows with
	// the table).
	require.Contains(t, f.explain(t, "countUnfinishedDispatchesSQL"), "tributary_dispatch_unfinished_idx")

	n, err := riverjob.DeleteWaitingDispatches(ctx, f.db.Pool, f.db.Schema, "c1", 3)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "at most the limit")
	n, err = riverjob.DeleteWaitingDispatches(ctx, f.db.Pool, f.db.Schema, "c1", 3)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the running one stays")
	running2, err := riverjob.CountRunningDispatches(ctx, f.db.Pool, f.db.Schema, "c1")
	require.NoError(t, err)
	require.EqualValues(t, 1, running2)
	counts, err = riverjob.CountUnfinishedDispatches(ctx, f.db.Pool, f.db.Schema)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"c1": 1, "c2": 1}, counts)
}

// TestQueuedAtHead runs the group commit's promotion, claim and completion
// as one pipelined batch: only the places whose lane's head is at them are
// promoted or claimed; lane events are claimed as a run from the head, up
// to the claim's Events and the first gap; a claim whose head is a pending
// job promotes that job, never more.
func TestQueuedAtHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, err := f.db.Pool.Exec(ctx, f.db.Q(`INSERT INTO /*schema*/tributary_event_lane (consumer, aggregate_id, head_seq, last_seq, updated_at)
VALUES ('c', 'a', 2, 3, now()), ('c', 'b', 1, 2, now()), ('c', 'd', 2, 3, now()), ('c', 'e', 1, 2, now()),
       ('c', 'f', 2, 4, now()), ('c', 'g', 2, 4, now()), ('c', 'h', 2, 4, now())`))
	require.NoError(t, err)
	// Lane events: f at 2, 3, 4; g at 2 and 4 (3 is missing); h at 2,
	// claimed by another chain already, and 3.
	_, err = f.db.Pool.Exec(ctx, f.db.Q(`INSERT INTO /*schema*/tributary_event_lane_event (consumer, aggregate_id, seq, queue, max_attempts, args, claimed_by, claimed_at)
VALUES ('c', 'f', 2, 'q', 5, '{}', NULL, NULL), ('c', 'f', 3, 'q', 5, '{}', NULL, NULL), ('c', 'f', 4, 'q', 5, '{}', NULL, NULL),
       ('c', 'g', 2, 'q', 5, '{}', NULL, NULL), ('c', 'g', 4, 'q', 5, '{}', NULL, NULL),
       ('c', 'h', 2, 'q', 5, '{}', 'other', now()), ('c', 'h', 3, 'q', 5, '{}', NULL, NULL)`))
	require.NoError(t, err)
	a2 := f.dispatchAt(t, "c", "a", 2, &river.InsertOpts{Pending: true, Queue: "qa"})
	b2 := f.dispatchAt(t, "c", "b", 2, &river.InsertOpts{Pending: true, Queue: "qb"})
	d2 := f.dispatchAt(t, "c", "d", 2, &river.InsertOpts{Pending: true})
	d3 := f.dispatchAt(t, "c", "d", 3, &river.InsertOpts{Pending: true})
	e2 := f.dispatchAt(t, "c", "e", 2, &river.InsertOpts{Pending: true})
	running := f.dispatchAt(t, "c", "x", 1, nil)
	f.start(t, running.ID, "w")

	var queues, claimQueues []string
	var completed []int64
	claimed := make([][]riverjob.Claimed, 5)
	f.inTx(t, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		riverjob.QueuePromoteAtHead(b, f.db.Schema, []riverjob.LaneSeq{
			{Consumer: "c", AggregateID: "a", Seq: 2}, {Consumer: "c", AggregateID: "b", Seq: 2},
		}, now, &queues)
		riverjob.QueueClaimAtHead(b, f.db.Schema, []riverjob.LaneClaim{
			{LaneSeq: riverjob.LaneSeq{Consumer: "c", AggregateID: "d", Seq: 2}, Events: 5},
			{LaneSeq: riverjob.LaneSeq{Consumer: "c", AggregateID: "e", Seq: 2}, Events: 5},
			{LaneSeq: riverjob.LaneSeq{Consumer: "c", AggregateID: "f", Seq: 2}, Events: 2},
			{LaneSeq: riverjob.LaneSeq{Consumer: "c", AggregateID: "g", Seq: 2}, Events: 5},
			{LaneSeq: riverjob.LaneSeq{Consumer: "c", AggregateID: "h", Seq: 2}, Events: 5},
		}, "p", now, claimed, &claimQueues)
		riverjob.QueueCompleteRunning(b, f.db.Schema, []riverjob.Attempt{{ID: running.ID, Attempt: 1}}, now, &completed)
		return tx.SendBatch(ctx, b).Close()
	})
	require.Equal(t, []string{"qa"}, queues, "lane b's head is not at 2")
	require.Equal(t, rivertype.JobStateAvailable, f.job(t, a2.ID).State)
	require.Equal(t, rivertype.JobStatePending, f.job(t, b2.ID).State)
	require.Empty(t, claimed[0], "lane d's head is a job: promoted, not claimed")
	require.Equal(t, rivertype.JobStateAvailable, f.job(t, d2.ID).State)
	require.Equal(t, rivertype.JobStatePending, f.job(t, d3.ID).State)
	require.Equal(t, []string{d2.Queue}, claimQueues)
	require.Empty(t, claimed[1], "lane e's head is not at 2")
	require.Equal(t, rivertype.JobStatePending, f.job(t, e2.ID).State)
	seqs := func(cs []riverjob.Claimed) []int64 {
		var out []int64
		for _, c := range cs {
			out = append(out, c.Seq)
		}
		return out
	}
	require.Equal(t, []int64{2, 3}, seqs(claimed[2]), "lane f: up to Events")
	require.Equal(t, []int64{2}, seqs(claimed[3]), "lane g: up to the gap at 3")
	require.Empty(t, claimed[4], "lane h: its head is another chain's")
	var byP []string
	rows, err := f.db.Pool.Query(ctx, f.db.Q(`SELECT aggregate_id || seq FROM /*schema*/tributary_event_lane_event WHERE claimed_by = 'p' ORDER BY 1`))
	require.NoError(t, err)
	byP, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"f2", "f3", "g2"}, byP)
	require.Equal(t, []int64{running.ID}, completed)
	require.Equal(t, rivertype.JobStateCompleted, f.job(t, running.ID).State)
}

// fixtureTime is 03:04:05 UTC on the given day of January 2026, as RFC 3339.
func fixtureTime(day int) string {
	return time.Date(2026, 1, day, 3, 4, 5, 0, time.UTC).Format(time.RFC3339)
}
