package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoevents"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// laneDispatch finds the dispatch job of an event for a consumer; state
// laneEvent (id 0) while the event waits behind its lane's head as a lane
// event.
func laneDispatch(t *testing.T, db *pgtest.DB, consumer, eventID string) (id int64, state string) {
	t.Helper()
	_ = db.Pool.QueryRow(context.Background(), db.Q(`
        SELECT id, state::text FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND args->>'consumer' = $1 AND (args->>'event')::jsonb->>'id' = $2
        UNION ALL
        SELECT 0, '`+laneEvent+`' FROM /*schema*/tributary_event_lane_event
        WHERE consumer = $1 AND (args::jsonb->>'event')::jsonb->>'id' = $2`),
		consumer, eventID).Scan(&id, &state)
	return id, state
}

// laneEvent is laneDispatch's state of an event waiting as a lane event.
const laneEvent = "lane event"

// asPendingJobs turns the lane events of aggregate agg (the events behind
// its lane's head) into pending dispatch jobs, as an older version wrote
// them: the jobs an operator's retry must not run out of order.
func asPendingJobs(t *testing.T, db *pgtest.DB, agg string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`WITH ev AS (
    DELETE FROM /*schema*/tributary_event_lane_event WHERE aggregate_id = $1 RETURNING queue, max_attempts, args
)
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, created_at, scheduled_at, priority, args, kind, metadata, queue, tags)
SELECT 'pending', 0, max_attempts, now(), now(), 1, jsonb_set(args::jsonb, '{event}', to_jsonb((args::jsonb -> 'event')::text)),
       'tributary.event.dispatch', '{}', queue, '{}' FROM ev`), agg)
	require.NoError(t, err)
}

func waitDispatch(t *testing.T, db *pgtest.DB, consumer, eventID string, states ...string) int64 {
	t.Helper()
	var id int64
	pgtest.WaitFor(t, 30*time.Second, "the dispatch of "+eventID+" to be "+strings.Join(states, " or "), func() (bool, error) {
		var s string
		id, s = laneDispatch(t, db, consumer, eventID)
		for _, want := range states {
			if s == want {
				return true, nil
			}
		}
		return false, nil
	})
	return id
}

func emitCLI(t *testing.T, db *pgtest.DB, eventType, payload, aggregate string) string {
	t.Helper()
	res := cli(t, db, nil, "emit", eventType, payload, "--aggregate", aggregate)
	require.Equal(t, exitOK, res.code, res.stderr)
	return strings.TrimSpace(res.stdout)
}

// TestCLILaneHeadCancelAndDelete is the reproduction from the issue, on a
// real worker with the demo consumer: `jobs cancel` or `jobs delete` of a
// lane's failing head lets the event behind it run at once.
func TestCLILaneHeadCancelAndDelete(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	worker, logs := startWorker(t, db)
	t.Cleanup(func() { stopWorker(t, worker, 30*time.Second) })

	cancelHead := emitCLI(t, db, "demo.note", `{"fail":true}`, "A")
	cancelNext := emitCLI(t, db, "demo.note", `{}`, "A")
	deleteHead := emitCLI(t, db, "demo.note", `{"fail":true}`, "B")
	deleteNext := emitCLI(t, db, "demo.note", `{}`, "B")

	// Between its retries the failing head waits as retryable: the demo
	// consumer retries after 1 s, 5 s and 15 s.
	id := waitDispatch(t, db, demoevents.ConsumerName, cancelHead, "retryable")
	res := cli(t, db, nil, "jobs", "cancel", strconv.FormatInt(id, 10))
	require.Equal(t, exitOK, res.code, res.stderr)
	id = waitDispatch(t, db, demoevents.ConsumerName, deleteHead, "retryable")
	res = cli(t, db, nil, "jobs", "delete", strconv.FormatInt(id, 10))
	require.Equal(t, exitOK, res.code, res.stderr)

	// Well before the lane repair's first sweep (30 s plus a 10 s quiet
	// period) would have found them.
	start := time.Now()
	for _, ev := range []string{cancelNext, deleteNext} {
		pgtest.WaitFor(t, 10*time.Second, "the event behind the given-up head to be handled", func() (bool, error) {
			_, s := laneDispatch(t, db, demoevents.ConsumerName, ev)
			return s == "completed", nil
		})
	}
	t.Logf("events behind the cancelled and the deleted head handled %s after the actions", time.Since(start).Round(time.Millisecond))
	_, s := laneDispatch(t, db, demoevents.ConsumerName, cancelHead)
	require.Equal(t, "cancelled", s, "the given-up event stays visible, replayable")
	require.NotContains(t, logs.String(), "level=ERROR")
}

// laneWorld is an ordered consumer run in the test process, whose handler
// fails for notes with "fail" while failing is on.
type laneWorld struct {
	db      *pgtest.DB
	failing atomic.Bool
	gate    chan struct{}

	mu      sync.Mutex
	handled []string
}

const laneConsumer = "orders.audit"

func startLaneWorld(t *testing.T, ordering events.Ordering) *laneWorld {
	t.Helper()
	w := &laneWorld{db: pgtest.New(t), gate: make(chan struct{})}
	w.failing.Store(true)
	c, err := events.NewConsumer(events.ConsumerConfig{Name: laneConsumer, Ordering: ordering, RetryDelays: []time.Duration{10 * time.Millisecond}})
	require.NoError(t, err)
	events.On(c, demoevents.NoteEvent, func(ctx context.Context, m events.Message[demoevents.Note]) error {
		if m.Payload.Fail && w.failing.Load() {
			return errors.New("ledger unavailable")
		}
		if m.Payload.Text == "gate" {
			select {
			case <-w.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w.mu.Lock()
		w.handled = append(w.handled, m.ID)
		w.mu.Unlock()
		return nil
	})
	events.On(c, demoevents.OrderPlacedEvent, func(ctx context.Context, m events.Message[demoevents.OrderPlaced]) error {
		w.mu.Lock()
		w.handled = append(w.handled, m.ID)
		w.mu.Unlock()
		return nil
	})
	pgtest.StartRuntime(t, w.db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c},
			Forwarder: events.ForwarderConfig{SweepInterval: 100 * time.Millisecond}})
		require.NoError(t, err)
	})
	return w
}

func (w *laneWorld) order() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.handled...)
}

func (w *laneWorld) waitHandled(t *testing.T, ids ...string) {
	t.Helper()
	pgtest.WaitFor(t, 20*time.Second, "events "+strings.Join(ids, ", ")+" to be handled", func() (bool, error) {
		got := map[string]bool{}
		for _, id := range w.order() {
			got[id] = true
		}
		for _, id := range ids {
			if !got[id] {
				return false, nil
			}
		}
		return true, nil
	})
}

// TestCLIJobsRetryRefusesNonHead: `jobs retry` of a dispatch still waiting
// behind its lane's head would run it out of order; it is refused, naming
// the job it waits behind, and nothing changes.
func TestCLIJobsRetryRefusesNonHead(t *testing.T) {
	t.Parallel()
	w := startLaneWorld(t, events.OrderingBlock)
	head := emitCLI(t, w.db, "demo.note", `{"text":"gate"}`, "A")
	next := emitCLI(t, w.db, "demo.note", `{}`, "A")
	headJob := waitDispatch(t, w.db, laneConsumer, head, "running")
	waitDispatch(t, w.db, laneConsumer, next, laneEvent)
	asPendingJobs(t, w.db, "A")
	nextJob := waitDispatch(t, w.db, laneConsumer, next, "pending")

	res := cli(t, w.db, nil, "jobs", "retry", strconv.FormatInt(nextJob, 10))
	require.Equal(t, exitUsage, res.code, "stdout: %s, stderr: %s", res.stdout, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "waits behind job "+strconv.FormatInt(headJob, 10))
	_, s := laneDispatch(t, w.db, laneConsumer, next)
	require.Equal(t, "pending", s)

	close(w.gate)
	w.waitHandled(t, head, next)
	require.Equal(t, []string{head, next}, w.order())
}

type laneListing struct {
	Lanes []struct {
		Consumer    string    `json:"consumer"`
		AggregateID string    `json:"aggregate_id"`
		JobID       int64     `json:"job_id"`
		JobState    string    `json:"job_state"`
		Reason      string    `json:"reason"`
		Since       time.Time `json:"since"`
		Waiting     int64     `json:"waiting"`
	} `json:"lanes"`
}

func listLanes(t *testing.T, db *pgtest.DB, args ...string) laneListing {
	t.Helper()
	res := cli(t, db, nil, append([]string{"lanes", "list", "--json"}, args...)...)
	require.Equal(t, exitOK, res.code, res.stderr)
	var l laneListing
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &l), res.stdout)
	return l
}

// TestCLILanes: a discarded head under OrderingBlock holds its lane,
// visibly, until `lanes retry` or `lanes skip`; a validation failure under
// Block holds it too, and skip is the way forward.
func TestCLILanes(t *testing.T) {
	t.Parallel()
	w := startLaneWorld(t, events.OrderingBlock)
	retryHead := emitCLI(t, w.db, "demo.note", `{"fail":true}`, "retry-me")
	retryNext := emitCLI(t, w.db, "demo.note", `{}`, "retry-me")
	skipHead := emitCLI(t, w.db, "demo.note", `{"fail":true}`, "skip-me")
	skipNext := emitCLI(t, w.db, "demo.note", `{}`, "skip-me")
	retryJob := waitDispatch(t, w.db, laneConsumer, retryHead, "discarded")
	skipJob := waitDispatch(t, w.db, laneConsumer, skipHead, "discarded")

	// A payload the consumer's type rejects, from a looser producer.
	type loose struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
	}
	looseDef := events.Define[loose]("demo.order_placed", nil)
	reg, err := events.NewRegistry(looseDef)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: w.db.Schema, Registry: reg})
	require.NoError(t, err)
	invalid, err := em.Emit(context.Background(), w.db.Pool, looseDef, loose{OrderID: "o-9", Amount: -9}, events.Meta{AggregateID: "invalid"})
	require.NoError(t, err)
	invalidNext := emitCLI(t, w.db, "demo.note", `{}`, "invalid")
	invalidJob := waitDispatch(t, w.db, laneConsumer, invalid, "cancelled")

	pgtest.WaitFor(t, 20*time.Second, "three blocked lanes", func() (bool, error) {
		return len(listLanes(t, w.db).Lanes) == 3, nil
	})
	l := listLanes(t, w.db, "--consumer", laneConsumer)
	require.Len(t, l.Lanes, 3)
	byAgg := map[string]int{}
	for i, ln := range l.Lanes {
		byAgg[ln.AggregateID] = i
		require.Equal(t, laneConsumer, ln.Consumer)
		require.Equal(t, int64(1), ln.Waiting)
		require.False(t, ln.Since.IsZero())
	}
	require.Equal(t, retryJob, l.Lanes[byAgg["retry-me"]].JobID)
	require.Equal(t, skipJob, l.Lanes[byAgg["skip-me"]].JobID)
	require.Equal(t, "discarded", l.Lanes[byAgg["retry-me"]].JobState)
	require.Contains(t, l.Lanes[byAgg["retry-me"]].Reason, "ledger unavailable")
	require.Equal(t, invalidJob, l.Lanes[byAgg["invalid"]].JobID)
	require.Equal(t, "cancelled", l.Lanes[byAgg["invalid"]].JobState)
	require.Contains(t, l.Lanes[byAgg["invalid"]].Reason, "amount -9 must not be negative")
	require.Empty(t, listLanes(t, w.db, "--consumer", "someone.else").Lanes)

	res := cli(t, w.db, nil, "lanes", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "aggregate retry-me of consumer "+laneConsumer+" blocked by job "+strconv.FormatInt(retryJob, 10))
	require.Contains(t, res.stdout, "ledger unavailable")

	// Nothing behind a blocked head ran.
	require.Empty(t, w.order())

	w.failing.Store(false)
	res = cli(t, w.db, nil, "lanes", "retry", laneConsumer, "retry-me")
	require.Equal(t, exitOK, res.code, res.stderr)
	w.waitHandled(t, retryHead, retryNext)
	res = cli(t, w.db, nil, "lanes", "skip", laneConsumer, "skip-me")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, w.db, nil, "lanes", "skip", laneConsumer, "invalid")
	require.Equal(t, exitOK, res.code, res.stderr)
	w.waitHandled(t, skipNext, invalidNext)
	require.Equal(t, []string{retryHead, retryNext}, filter(w.order(), retryHead, retryNext), "retried in order")
	require.NotContains(t, w.order(), skipHead, "skipped, not run")
	_, s := laneDispatch(t, w.db, laneConsumer, skipHead)
	require.Equal(t, "discarded", s, "the skipped event stays replayable")
	require.Empty(t, listLanes(t, w.db).Lanes)

	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"lanes", "skip", laneConsumer, "retry-me"}, `aggregate "retry-me" of consumer "` + laneConsumer + `" is not blocked`},
		{[]string{"lanes", "retry", "no.such.consumer", "A"}, `"no.such.consumer"`},
		{[]string{"lanes", "skip", laneConsumer}, "accepts 2 arg"},
		{[]string{"lanes", "skip", "", "A"}, "consumer"},
	} {
		res := cli(t, w.db, nil, tc.args...)
		require.Equal(t, exitUsage, res.code, "%v: %s", tc.args, res.stderr)
		oneSentence(t, res.stderr)
		require.Contains(t, res.stderr, tc.mention)
		require.Empty(t, res.stdout)
	}
}

func filter(ids []string, keep ...string) []string {
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

// TestCLIConsumers: `consumers list` shows every consumer with its
// subscriptions, when a worker last ran it, its pending work and blocked
// lanes; `consumers remove` removes a consumer nobody runs with its work.
func TestCLIConsumers(t *testing.T) {
	t.Parallel()
	w := startLaneWorld(t, events.OrderingBlock)
	ctx := context.Background()

	// "billing.v1" was renamed away: no worker runs it any more.
	old, err := events.NewConsumer(events.ConsumerConfig{Name: "billing.v1"})
	require.NoError(t, err)
	events.On(old, demoevents.NoteEvent, func(ctx context.Context, m events.Message[demoevents.Note]) error { return nil })
	d, err := events.NewDispatcher(w.db.Pool, events.DispatcherConfig{Schema: w.db.Schema, Consumers: []*events.Consumer{old}, LaneRepairInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, d.Stop(ctx))
	_, err = w.db.Pool.Exec(ctx, w.db.Q(`UPDATE /*schema*/tributary_event_consumer SET seen_at = seen_at - interval '1 hour' WHERE name = 'billing.v1'`))
	require.NoError(t, err)

	emitCLI(t, w.db, "demo.note", `{"fail":true}`, "A")
	ok := emitCLI(t, w.db, "demo.note", `{}`, "A")
	pgtest.WaitFor(t, 20*time.Second, "a blocked lane", func() (bool, error) {
		return len(listLanes(t, w.db).Lanes) == 1, nil
	})
	waitDispatch(t, w.db, "billing.v1", ok, laneEvent)

	res := cli(t, w.db, nil, "consumers", "list", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var listing struct {
		Consumers []struct {
			Name         string    `json:"name"`
			Patterns     []string  `json:"patterns"`
			Queue        string    `json:"queue"`
			Ordering     string    `json:"ordering"`
			SeenAt       time.Time `json:"seen_at"`
			Active       bool      `json:"active"`
			Pending      int64     `json:"pending"`
			BlockedLanes int64     `json:"blocked_lanes"`
		} `json:"consumers"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &listing), res.stdout)
	require.Len(t, listing.Consumers, 2)
	gone, audit := listing.Consumers[0], listing.Consumers[1]
	require.Equal(t, "billing.v1", gone.Name)
	require.Equal(t, []string{"demo.note"}, gone.Patterns)
	require.Equal(t, int64(2), gone.Pending)
	require.Less(t, gone.SeenAt, time.Now().Add(-50*time.Minute))
	require.Equal(t, laneConsumer, audit.Name)
	require.Equal(t, "block", audit.Ordering)
	require.True(t, audit.Active)
	require.Equal(t, int64(1), audit.BlockedLanes)
	require.Equal(t, int64(1), audit.Pending, "the event behind the blocked head")
	require.WithinDuration(t, time.Now(), audit.SeenAt, time.Minute)

	res = cli(t, w.db, nil, "consumers", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^billing\.v1\s+demo\.note\s+events\s+block\s+`, res.stdout)

	res = cli(t, w.db, nil, "consumers", "remove", "no.such.consumer")
	require.Equal(t, exitUsage, res.code, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, `"no.such.consumer"`)

	// A consumer a worker runs right now is not removed by mistake.
	res = cli(t, w.db, nil, "consumers", "remove", laneConsumer)
	require.Equal(t, exitUsage, res.code, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "--force")

	res = cli(t, w.db, nil, "consumers", "remove", "billing.v1")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "removed consumer billing.v1")
	var jobs, lanes, rows int
	require.NoError(t, w.db.Pool.QueryRow(ctx, w.db.Q(`SELECT
        (SELECT count(*) FROM /*schema*/river_job WHERE args->>'consumer' = 'billing.v1'),
        (SELECT count(*) FROM /*schema*/tributary_event_lane WHERE consumer = 'billing.v1'),
        (SELECT count(*) FROM /*schema*/tributary_event_consumer WHERE name = 'billing.v1')`)).Scan(&jobs, &lanes, &rows))
	require.Zero(t, lanes+rows)
	if jobs > 0 {
		// The worker, which does not run billing.v1, held one of its
		// dispatch jobs (to snooze it) as the removal ran: River does not
		// delete a running job. Such a job is cancelled when it ends, or,
		// if it was being snoozed, at its next run (within the snooze, at
		// most a minute): nothing of billing.v1 stays to run.
		t.Logf("%d dispatch job(s) of billing.v1 held by the worker as it was removed; removal said: %s", jobs, res.stdout)
		pgtest.WaitFor(t, 90*time.Second, "billing.v1's held dispatch cancelled", func() (bool, error) {
			var left int
			err := w.db.Pool.QueryRow(ctx, w.db.Q(`SELECT count(*) FROM /*schema*/river_job
                WHERE args->>'consumer' = 'billing.v1' AND state <> 'cancelled'`)).Scan(&left)
			return left == 0, err
		})
	}

	// New events reach only the consumer that is left.
	next := emitCLI(t, w.db, "demo.note", `{}`, "B")
	w.waitHandled(t, next)
	id, _ := laneDispatch(t, w.db, "billing.v1", next)
	require.Zero(t, id)
}
