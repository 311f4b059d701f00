package events_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

type seqPayload struct {
	N int `json:"n"`
}

var seqEvent = events.Define[seqPayload]("test.seq", nil)

// handlerLog records, per consumer, the handlers running at once (the
// most ever) and, per aggregate, the events handled in order of their
// handlers' start; its handlers work for a while, so that jobs overlap.
type handlerLog struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	handled map[string]map[string][]int // consumer, aggregate ("" for none): N
}

func newHandlerLog() *handlerLog {
	return &handlerLog{running: map[string]int{}, most: map[string]int{}, handled: map[string]map[string][]int{}}
}

func (l *handlerLog) handle(work time.Duration) events.HandlerFunc[seqPayload] {
	return func(ctx context.Context, msg events.Message[seqPayload]) error {
		l.mu.Lock()
		l.running[msg.Consumer]++
		l.most[msg.Consumer] = max(l.most[msg.Consumer], l.running[msg.Consumer])
		if l.handled[msg.Consumer] == nil {
			l.handled[msg.Consumer] = map[string][]int{}
		}
		l.handled[msg.Consumer][msg.AggregateID] = append(l.handled[msg.Consumer][msg.AggregateID], msg.Payload.N)
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.running[msg.Consumer]--
			l.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(work):
			return nil
		}
	}
}

// startCappedEvents starts a worker process's runtime with consumers
// "capped" (MaxHandlers maxHandlers) and "free" (no cap), both handling
// seqEvent through log, the limits' middleware and admitter declaring the
// capped consumer's limit, and a forwarder, as the front door sets them up.
func startCappedEvents(t *testing.T, db *pgtest.DB, id string, maxHandlers int, log *handlerLog) {
	t.Helper()
	consumer := func(name string, maxHandlers int) *events.Consumer {
		c := fastConsumer(t, name, func(cfg *events.ConsumerConfig) { cfg.MaxHandlers = maxHandlers })
		require.NoError(t, c.Subscribe(events.Handle(seqEvent, log.handle(20*time.Millisecond))))
		return c
	}
	capped, free := consumer("capped", maxHandlers), consumer("free", 0)
	l, ok := capped.Limit()
	require.True(t, ok)
	require.Equal(t, limits.Limit{Name: "consumer:capped", Kind: events.DispatchKind, Queue: events.QueueDefault, Max: maxHandlers}, l)
	_, ok = free.Limit()
	require.False(t, ok)
	lim, err := limits.New(limits.Config{Limits: []limits.Limit{l}, Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	rcfg := queue.RuntimeConfig{Middleware: []rivertype.Middleware{lim.Middleware()}}
	pgtest.StartRuntime(t, db, rcfg, func(rt *queue.Runtime) {
		_, err := lim.Register(rt)
		require.NoError(t, err)
		_, err = events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{capped, free},
			Forwarder: events.ForwarderConfig{ID: id, SweepInterval: 200 * time.Millisecond}})
		require.NoError(t, err)
	})
}

// startLimitedEvents is startEvents with the limits' middleware and
// admitter of l, the limit of a capped consumer of consumers.
func startLimitedEvents(t *testing.T, db *pgtest.DB, l limits.Limit, consumers ...*events.Consumer) (*queue.Runtime, *events.Installation) {
	t.Helper()
	lim, err := limits.New(limits.Config{Limits: []limits.Limit{l}, Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	var inst *events.Installation
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{lim.Middleware()}}, func(rt *queue.Runtime) {
		_, err := lim.Register(rt)
		require.NoError(t, err)
		inst, err = events.Install(rt, events.InstallConfig{Consumers: consumers, Forwarder: events.ForwarderConfig{SweepInterval: 200 * time.Millisecond}})
		require.NoError(t, err)
	})
	return rt, inst
}

// TestCappedBlockedHeadRetried: a capped consumer's blocked head, retried
// by the operator, waits for admission again, and so does its event put
// back from the lane's copy after River's retention deleted it; the lane
// then goes on in order, every job under the consumer's limit.
func TestCappedBlockedHeadRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanesWith(t, events.ConsumerConfig{Ordering: events.OrderingBlock, RetryDelays: []time.Duration{10 * time.Millisecond}, MaxHandlers: 1})
	b.failing.Store(true)
	client := b.db.Client(t)
	head := b.emit(t, "A", "flaky")
	next := b.emit(t, "A", "ok")
	headJob := b.waitJob(t, head, "discarded")
	require.Eventually(t, func() bool { return len(b.blockedLanes(t)) == 1 }, 10*time.Second, 20*time.Millisecond)
	limitOf := func(id int64) (state, limit string) {
		t.Helper()
		require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT state::text, coalesce(metadata ->> 'tributary_limit', '') FROM /*schema*/river_job WHERE id = $1`), id).Scan(&state, &limit))
		return state, limit
	}
	_, limit := limitOf(headJob)
	require.Equal(t, "consumer:lanes", limit, "the head ran under the consumer's limit")

	// Retried while still failing: River's retry goes through the door and
	// waits for admission, runs, and is discarded again.
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT attempt FROM /*schema*/river_job WHERE id = $1`), headJob).Scan(&attempts))
	res, err := events.RetryJob(ctx, client, headJob)
	require.NoError(t, err)
	require.Equal(t, "pending", string(res.Job.State), "a retried capped dispatch waits for admission")
	pgtest.WaitFor(t, 10*time.Second, "the retried head to run and be discarded again", func() (bool, error) {
		var attempt int
		_ = b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT attempt FROM /*schema*/river_job WHERE id = $1 AND state = 'discarded'`), headJob).Scan(&attempt)
		return attempt == attempts+1, nil
	})

	// What River's job cleaner does to a discarded job past its retention.
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`DELETE FROM /*schema*/river_job WHERE id = $1`), headJob)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(b.blockedLanes(t)) == 1 }, 10*time.Second, 20*time.Millisecond)
	b.failing.Store(false)
	res, err = events.RetryJob(ctx, client, headJob)
	require.NoError(t, err)
	require.Equal(t, headJob, res.ReinsertedFrom)
	require.Equal(t, "pending", string(res.Job.State), "the event put back waits for admission")
	require.JSONEq(t, `{"tributary_limit": "consumer:lanes", "tributary_limit_key": "", "tributary_lane_turn": true}`, string(res.Job.Metadata))
	b.waitHandled(t, next)
	require.Equal(t, []string{head, next}, b.handledOrder())
	for _, id := range []int64{res.Job.ID, b.waitJob(t, next, "completed")} {
		state, limit := limitOf(id)
		require.Equal(t, []string{"completed", "consumer:lanes"}, []string{state, limit}, "job %d", id)
	}
}

// lockedBuffer is a bytes.Buffer for a logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCappedConsumerWithoutLimitWarns: a capped consumer registered where
// no process declared its limit is recorded with the limit's name, and its
// registration warns that its jobs wait until a process declares it.
func TestCappedConsumerWithoutLimitWarns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var logs lockedBuffer
	c := fastConsumer(t, "capped", func(cfg *events.ConsumerConfig) { cfg.MaxHandlers = 1 })
	require.NoError(t, c.Subscribe(events.Handle(seqEvent, newHandlerLog().handle(0))))
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}})
		require.NoError(t, err)
	})
	require.Contains(t, logs.String(), "consumer is capped by a limit no process has declared")
	var limitName string
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT limit_name FROM /*schema*/tributary_event_consumer WHERE name = 'capped'`)).Scan(&limitName))
	require.Equal(t, "consumer:capped", limitName)
}

// TestConsumerMaxHandlersAcrossRuntimes runs a consumer capped at 2
// handlers at once and an uncapped one beside it on two runtimes of 10
// workers each, over 20 aggregates of 8 events and 40 events without an
// aggregate, emitted in four transactions. Until every event was handled
// by both, it samples the capped consumer's dispatch jobs in the database:
// never more than 2 running, or holding a slot (running or available);
// the handlers themselves, counted as they run, never more than 2 at once.
// Every event reaches both consumers, each aggregate's in emit order; the
// capped consumer's every job completed under its limit, the free
// consumer's under none, and the free one ran more than 2 handlers at once.
func TestConsumerMaxHandlersAcrossRuntimes(t *testing.T) {
	t.Parallel()
	const (
		maxHandlers = 2
		aggregates  = 20
		perAgg      = 8
		unordered   = 40
		total       = aggregates*perAgg + unordered
	)
	db := pgtest.New(t)
	ctx := context.Background()
	log := newHandlerLog()
	startCappedEvents(t, db, "fwd-1", maxHandlers, log)
	startCappedEvents(t, db, "fwd-2", maxHandlers, log)

	em := newEmitter(t, db, seqEvent)
	var batch []events.Emission
	for n := range total {
		meta := events.Meta{}
		if n < aggregates*perAgg {
			meta.AggregateID = fmt.Sprintf("agg-%02d", n%aggregates)
		}
		batch = append(batch, events.Emission{Def: seqEvent, Payload: seqPayload{N: n}, Meta: meta})
		if len(batch) == total/4 {
			_, err := em.EmitMany(ctx, db.Pool, batch)
			require.NoError(t, err)
			batch = nil
		}
	}

	handledAll := func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, c := range []string{"capped", "free"} {
			n := 0
			for _, ns := range log.handled[c] {
				n += len(ns)
			}
			if n < total {
				return false
			}
		}
		return true
	}
	hist := map[int]int{} // running capped jobs: samples
	var samples, mostHolding, mostOnRelease int
	deadline := time.Now().Add(3 * time.Minute)
	for !handledAll() {
		var running, holding, onRelease int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state IN ('available', 'running')),
       count(*) FILTER (WHERE state = 'pending' AND metadata ? 'tributary_limit_on_release')
FROM /*schema*/river_job WHERE args ->> 'consumer' = 'capped'`)).Scan(&running, &holding, &onRelease))
		samples++
		hist[running]++
		mostHolding, mostOnRelease = max(mostHolding, holding), max(mostOnRelease, onRelease)
		require.LessOrEqual(t, running, maxHandlers, "capped dispatch jobs running at once (sample %d)", samples)
		require.LessOrEqual(t, holding, maxHandlers, "capped dispatch jobs running or available at once (sample %d)", samples)
		require.True(t, time.Now().Before(deadline), "not every event was handled in time")
	}
	var counts []string
	for _, k := range sortedKeys(hist) {
		counts = append(counts, fmt.Sprintf("%d running: %d", k, hist[k]))
	}
	t.Logf("%d samples of the capped consumer's dispatch jobs: %v; most holding a slot %d, most waiting behind a lane's head %d",
		samples, counts, mostHolding, mostOnRelease)

	log.mu.Lock()
	mostCapped, mostFree := log.most["capped"], log.most["free"]
	handled := log.handled
	log.mu.Unlock()
	t.Logf("handlers at once: capped %d, free %d", mostCapped, mostFree)
	require.LessOrEqual(t, mostCapped, maxHandlers, "capped handlers running at once")
	require.Greater(t, mostFree, maxHandlers, "the free consumer's handlers at once: the cap is the capped consumer's only")
	require.Positive(t, mostOnRelease, "events waited behind their lane's head as pending jobs, marked for their release")

	for _, c := range []string{"capped", "free"} {
		seen := map[int]bool{}
		for agg, ns := range handled[c] {
			last := -1
			for _, n := range ns {
				seen[n] = true
				if agg == "" || n == last {
					continue // no order to keep; a re-run of the same event
				}
				require.Greater(t, n, last, "consumer %s, aggregate %s: events in emit order (%v)", c, agg, ns)
				last = n
			}
		}
		require.Len(t, seen, total, "consumer %s handled every event", c)
	}

	// The capped consumer's jobs all went through its limit, the free
	// one's through none. (A job's completion may still be committing.)
	pgtest.WaitFor(t, 30*time.Second, "every dispatch job completed", func() (bool, error) {
		var left int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE state <> 'completed'`)).Scan(&left)
		return left == 0, err
	})
	var cappedJobs, cappedLimited, freeJobs, freeLimited int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`
SELECT count(*) FILTER (WHERE args ->> 'consumer' = 'capped'),
       count(*) FILTER (WHERE args ->> 'consumer' = 'capped' AND metadata ->> 'tributary_limit' = 'consumer:capped'
                         AND NOT metadata ? 'tributary_limit_on_release'),
       count(*) FILTER (WHERE args ->> 'consumer' = 'free'),
       count(*) FILTER (WHERE args ->> 'consumer' = 'free' AND (metadata ? 'tributary_limit' OR metadata ? 'tributary_limit_on_release'))
FROM /*schema*/river_job`)).Scan(&cappedJobs, &cappedLimited, &freeJobs, &freeLimited))
	t.Logf("dispatch jobs: capped %d (%d under its limit), free %d (%d limited)", cappedJobs, cappedLimited, freeJobs, freeLimited)
	require.Positive(t, cappedJobs)
	require.Equal(t, cappedJobs, cappedLimited, "the capped consumer's jobs that ran under its limit")
	require.Positive(t, freeJobs)
	require.Zero(t, freeLimited, "the free consumer's limited jobs")
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
