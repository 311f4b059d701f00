package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// chainBacklog emits a "gate" head and then texts on aggregate agg, waits
// until all of them are forwarded (they wait behind the head as lane
// events), and returns the ids, head first.
func (b *laneBundle) chainBacklog(t *testing.T, agg string, texts ...string) []string {
	t.Helper()
	ids := []string{b.emit(t, agg, "gate")}
	for _, text := range texts {
		ids = append(ids, b.emit(t, agg, text))
	}
	b.waitJob(t, ids[0], "running")
	for _, id := range ids[1:] {
		b.waitJob(t, id, laneEvent)
	}
	return ids
}

// jobStateAttempt is the event's dispatch job's state and attempt; laneEvent
// and 0 while it waits as a lane event.
func (b *laneBundle) jobStateAttempt(t *testing.T, eventID string) (string, int) {
	t.Helper()
	var state string
	var attempt int
	err := b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT state::text, attempt FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND (args->>'event')::jsonb->>'id' = $1`), eventID).Scan(&state, &attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		if st := b.laneEventState(t, eventID); st != "" {
			return st, 0
		}
		return "", 0 // handled in a chain: no job, no lane event
	}
	require.NoError(t, err)
	return state, attempt
}

// waiting reports whether a state (jobStateAttempt's) waits for its turn:
// a lane event, or a dispatch job given back to pending.
func waiting(state string) bool { return state == laneEvent || state == "pending" }

// TestLaneChainRunsBacklogInPlace: once a lane's head is handled, the
// worker runs the lane's waiting events after it in place (no River fetch
// each), in order, from their lane events: the head's job ends completed,
// the others leave neither a job nor a lane event.
func TestLaneChainRunsBacklogInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	texts := make([]string, 30)
	for i := range texts {
		texts[i] = fmt.Sprintf("n%d", i)
	}
	ids := b.chainBacklog(t, "A", texts...)
	close(b.gate)
	pgtest.WaitFor(t, 15*time.Second, "every event to be handled", func() (bool, error) {
		return b.rec.count(nil) == len(ids), nil
	})
	require.Equal(t, ids, b.handledOrder(), "handled in emit order")
	require.Positive(t, b.inst.Dispatcher.Stats().Chained, "events after the head ran in place")
	// A chain that ends (its wall time) leaves its lane's head to a River
	// job, which chains on: a few jobs, not one per event.
	pgtest.WaitFor(t, 15*time.Second, "the dispatch jobs to be completed", func() (bool, error) {
		all := b.dispatchJobs(t, "A", "")
		return all > 0 && b.dispatchJobs(t, "A", "completed") == all, nil
	})
	jobs := b.dispatchJobs(t, "A", "")
	require.Less(t, jobs, len(ids)/2, "the chained events ran without jobs (%d jobs for %d events)", jobs, len(ids))
	// The head's job completes when the chain starts, and a chained
	// event's handler has run before the commit that deletes its lane
	// event and moves the lane: wait for the last step's commit.
	var head, last int64
	pgtest.WaitFor(t, 15*time.Second, "the lane's events deleted and the lane past them", func() (bool, error) {
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT head_seq, last_seq FROM /*schema*/tributary_event_lane WHERE aggregate_id = 'A'`)).Scan(&head, &last)
		return err == nil && b.laneEventCount(t, "A") == 0 && head == last+1, err
	})
}

// TestLaneChainNoChainWithDispatchBatch1: DispatchBatch 1 keeps one River
// job run per event for lanes too.
func TestLaneChainNoChainWithDispatchBatch1(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rec := &recorder{}
	c := fastConsumer(t, "lanes", func(cfg *events.ConsumerConfig) { cfg.DispatchBatch = 1 })
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		rec.add(call{eventID: m.ID})
		return nil
	})
	_, inst := startEvents(t, db, events.ForwarderConfig{}, c)
	ids := emitLane(t, db, "A", "a", "b", "c", "d", "e")
	pgtest.WaitFor(t, 15*time.Second, "every event to be handled", func() (bool, error) { return rec.count(nil) == len(ids), nil })
	require.Zero(t, inst.Dispatcher.Stats().Chained)
}

// TestLaneChainFailureKeepsOrder: an event that fails inside a chain is
// recorded as a failed attempt of its own job (retried on the consumer's
// delays); the events behind it stay pending, no attempt spent, and run
// only after it succeeded.
func TestLaneChainFailureKeepsOrder(t *testing.T) {
	t.Parallel()
	d := 50 * time.Millisecond
	b := setupLanes(t, events.OrderingBlock, d, d, d, d, d, d)
	b.failing.Store(true)
	ids := b.chainBacklog(t, "A", "a", "flaky", "c", "d")
	close(b.gate)
	pgtest.WaitFor(t, 15*time.Second, "the flaky event to fail twice", func() (bool, error) {
		_, _, errs := dispatchJob(t, b.db, "lanes", ids[2])
		return len(errs) > 0 && countSubstr(errs, "downstream is flaky") >= 2, nil
	})
	require.Equal(t, ids[:2], b.handledOrder(), "nothing behind the failing event ran")
	for _, id := range ids[3:] {
		state, attempt := b.jobStateAttempt(t, id)
		require.True(t, waiting(state), "%s waits, not %s", id, state)
		require.Zero(t, attempt, "a claimed event that did not run has its attempt given back")
	}
	b.failing.Store(false)
	b.waitHandled(t, ids[4])
	require.Equal(t, ids, b.handledOrder())
	requireDispatchEventsPacked(t, b.db)
}

// requireDispatchEventsPacked checks that every dispatch job in db carries
// its event packed (a string, one entry of River's GIN index on args),
// also where a lane event (which keeps its event as an object) became one:
// failed in a chain, blocked its lane, or was promoted in SQL.
func requireDispatchEventsPacked(t *testing.T, db *pgtest.DB) {
	t.Helper()
	var n, objects int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*), count(*) FILTER (WHERE jsonb_typeof(args -> 'event') <> 'string')
        FROM /*schema*/river_job WHERE kind = 'tributary.event.dispatch'`)).Scan(&n, &objects))
	require.Positive(t, n)
	require.Zero(t, objects, "dispatch jobs with the event as an object")
	var blocked int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/tributary_event_lane
        WHERE blocked_args IS NOT NULL AND jsonb_typeof(blocked_args::jsonb -> 'event') <> 'string'`)).Scan(&blocked))
	require.Zero(t, blocked, "blocked lanes' args with the event as an object")
}

func countSubstr(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// TestLaneChainValidationBlocksThenSkip: under OrderingBlock an event that
// fails validation inside a chain is cancelled and blocks its lane, visibly,
// with the events behind it waiting; skipping it runs them.
func TestLaneChainValidationBlocksThenSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	head := b.emit(t, "V", "gate")
	a := b.emit(t, "V", "a")
	bad := b.emitInvalid(t, "V")
	after := b.emit(t, "V", "after")
	b.waitJob(t, head, "running")
	for _, id := range []string{a, bad, after} {
		b.waitJob(t, id, laneEvent)
	}
	close(b.gate)
	badJob := b.waitJob(t, bad, "cancelled")
	pgtest.WaitFor(t, 15*time.Second, "the lane to be listed as blocked", func() (bool, error) {
		lanes, err := events.ListBlockedLanes(ctx, b.db.Pool, b.db.Schema, events.LaneListParams{})
		return len(lanes) == 1 && lanes[0].JobID == badJob && lanes[0].AggregateID == "V", err
	})
	requireDispatchEventsPacked(t, b.db)
	require.Equal(t, []string{head, a}, b.handledOrder())
	state, attempt := b.jobStateAttempt(t, after)
	require.True(t, waiting(state), state)
	require.Zero(t, attempt)

	_, err := events.SkipLane(ctx, b.db.Client(t), "lanes", "V")
	require.NoError(t, err)
	b.waitHandled(t, after)
	require.Equal(t, []string{head, a, after}, b.handledOrder())
}

// TestLaneChainSkipPolicy: under OrderingSkip an event given up inside a
// chain lets the lane move on at once.
func TestLaneChainSkipPolicy(t *testing.T) {
	t.Parallel()
	b := setupLanes(t, events.OrderingSkip)
	head := b.emit(t, "S", "gate")
	bad := b.emitInvalid(t, "S")
	after := b.emit(t, "S", "after")
	b.waitJob(t, head, "running")
	b.waitJob(t, bad, laneEvent)
	b.waitJob(t, after, laneEvent)
	close(b.gate)
	b.waitHandled(t, after)
	b.waitJob(t, bad, "cancelled")
	require.Equal(t, []string{head, after}, b.handledOrder())
	requireDispatchEventsPacked(t, b.db)
}

// TestLaneChainShutdownGivesBackTheRest: a stop that interrupts a chain
// records the events it handled and puts the rest back, the interrupted one
// included, without spending their attempts: a restart delivers only what
// was not recorded.
func TestLaneChainShutdownGivesBackTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A split time no run reaches: under load the chain's split (50 ms of
	// handlers) or wall time (20 times that) could end the chain before
	// the hanging event, which would then run as a job of its own, not
	// the claimed lane event this test interrupts.
	b := setupLanesWith(t, events.ConsumerConfig{Ordering: events.OrderingBlock, RetryDelays: []time.Duration{10 * time.Millisecond},
		DispatchBatchSplitAfter: time.Minute})
	ids := b.chainBacklog(t, "H", "a", "b", "hang", "c", "d")
	close(b.gate)
	pgtest.WaitFor(t, 15*time.Second, "the chain to reach the hanging event", func() (bool, error) {
		state, _ := b.jobStateAttempt(t, ids[3])
		return b.rec.count(nil) == 3 && state == laneEventClaimed, nil
	})
	require.Positive(t, b.inst.Dispatcher.Stats().Chained)
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = b.rt.Stop(stopCtx) // the soft stop times out; the hard stop cancels the handler
	pgtest.WaitFor(t, 15*time.Second, "the interrupted chain to be recorded", func() (bool, error) {
		state, _ := b.jobStateAttempt(t, ids[4])
		return waiting(state), nil
	})
	state, _ := b.jobStateAttempt(t, ids[0])
	require.Equal(t, "completed", state, "the head's job is recorded")
	// The event after the gate is recorded either way: as a lane event
	// (gone) or, had the gate's handler run past the split time, as its
	// own job.
	state, _ = b.jobStateAttempt(t, ids[1])
	require.Contains(t, []string{"", "completed"}, state, "the event after the gate is recorded: gone, or its own job completed")
	state, _ = b.jobStateAttempt(t, ids[2])
	require.Empty(t, state, "a handled lane event is recorded: gone")
	state, attempt := b.jobStateAttempt(t, ids[3])
	require.Contains(t, []string{"pending", "available"}, state, "the interrupted event waits to run again, as a dispatch job")
	require.Zero(t, attempt, "the interruption spent no attempt")
	for _, id := range ids[4:] {
		state, attempt := b.jobStateAttempt(t, id)
		require.True(t, waiting(state), state)
		require.Zero(t, attempt)
	}
	var head int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT head_seq FROM /*schema*/tributary_event_lane WHERE aggregate_id = 'H'`)).Scan(&head))
	require.EqualValues(t, 4, head, "the lane's head is the interrupted event")
	requireDispatchEventsPacked(t, b.db)
}

// TestLaneRepairGivesBackALostRunningHead: a lane head left running under
// this very process with nothing in the process running it (a lost chain
// claim) is given back and runs, instead of holding the lane until River's
// rescuer an hour later; a running head the process does run is left
// alone.
func TestLaneRepairGivesBackALostRunningHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	head := b.emit(t, "O", "gate")
	lost := b.emit(t, "O", "lost")
	headJob := b.waitJob(t, head, "running")
	b.waitJob(t, lost, laneEvent)
	// The lane moved on to "lost", claimed by this process 30 s ago (River's rescuer waits an hour) and
	// then forgotten: its lane event made a running job, as a chain's claim makes it.
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_event_lane SET head_seq = head_seq + 1 WHERE aggregate_id = 'O'`))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`WITH ev AS (DELETE FROM /*schema*/tributary_event_lane_event WHERE aggregate_id = 'O' RETURNING queue, max_attempts, args)
        INSERT INTO /*schema*/river_job (state, attempt, max_attempts, attempted_at, attempted_by, scheduled_at, args, kind, queue)
        SELECT 'running', 1, max_attempts, now() - interval '30 seconds', ARRAY[$1::text], now(), args::jsonb, 'tributary.event.dispatch', queue FROM ev`),
		b.rt.ProcessID())
	require.NoError(t, err)
	b.ageLanes(t)
	b.inst.Dispatcher.RepairLanes(ctx)
	b.waitHandled(t, lost)
	b.waitJob(t, lost, "completed")
	require.Equal(t, []string{lost}, b.handledOrder())

	// The gate's job, running in this process's Work, was not touched.
	var st string
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT state::text FROM /*schema*/river_job WHERE id = $1`), headJob).Scan(&st))
	require.Equal(t, "running", st)
	close(b.gate)
}
