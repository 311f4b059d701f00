package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// eachPublisher is a plain destination with an outcome per event: it
// refuses the events refuse says no to and records what it was handed, in
// order, and what it accepted.
type eachPublisher struct {
	name   string
	refuse func(e outbox.Event, attempt int) bool

	mu       sync.Mutex
	handed   []string // event ids in the order they were handed over
	attempts map[string]int
	accepted map[string]int
}

func newEachPublisher(name string, refuse func(e outbox.Event, attempt int) bool) *eachPublisher {
	return &eachPublisher{name: name, refuse: refuse, attempts: map[string]int{}, accepted: map[string]int{}}
}

func (p *eachPublisher) Name() string { return p.name }

func (p *eachPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	return errors.Join(p.PublishOutboxEvents(ctx, evs)...)
}

func (p *eachPublisher) PublishOutboxEvents(ctx context.Context, evs []outbox.Event) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(evs))
	seen := map[string]bool{}
	for i, e := range evs {
		if e.AggregateID != "" && seen[e.AggregateID] {
			panic("two events of one aggregate in one call")
		}
		seen[e.AggregateID] = true
		p.handed = append(p.handed, e.ID)
		p.attempts[e.ID]++
		if p.refuse != nil && p.refuse(e, p.attempts[e.ID]) {
			errs[i] = fmt.Errorf("refused %s", e.EventType)
			continue
		}
		p.accepted[e.ID]++
	}
	return errs
}

func (p *eachPublisher) snapshot() (handed []string, attempts, accepted map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	attempts, accepted = map[string]int{}, map[string]int{}
	for k, v := range p.attempts {
		attempts[k] = v
	}
	for k, v := range p.accepted {
		accepted[k] = v
	}
	return append([]string(nil), p.handed...), attempts, accepted
}

type outboxState struct {
	Status, LastError string
	Retries           int
	Delivered         []string
	NextAttempt       *time.Time
}

func outboxRow(t *testing.T, db *pgtest.DB, id string) outboxState {
	t.Helper()
	var s outboxState
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
        SELECT status, coalesce(last_error, ''), retry_count, coalesce(delivered_to, '{}'), next_attempt_at
        FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&s.Status, &s.LastError, &s.Retries, &s.Delivered, &s.NextAttempt))
	return s
}

func startForwarder(t *testing.T, db *pgtest.DB, cfg events.ForwarderConfig) *events.Forwarder {
	t.Helper()
	cfg.Schema, cfg.Logger = db.Schema, pgtest.Logger(t)
	f, err := events.NewForwarder(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	return f
}

// TestForwarderPerDestination: each destination's outcome is its own. A
// destination that refuses an event gets it again after a backoff, the
// others do not; an aggregate's later event is held back from the
// destination that failed the earlier one until that one is settled
// (FAILED here), and never handed to it before.
func TestForwarderPerDestination(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	em := newEmitter(t, db)
	ids, err := em.EmitMany(ctx, db.Pool, []events.Emission{
		{Def: noteEvent, Payload: noteV1{Text: "flaky"}},
		{Def: noteEvent, Payload: noteV1{Text: "fine"}},
		{Def: orderPlacedEvent, Payload: orderPlaced{OrderID: "a1"}, Meta: events.Meta{AggregateID: "A"}},
		{Def: noteEvent, Payload: noteV1{Text: "a2"}, Meta: events.Meta{AggregateID: "A"}},
	})
	require.NoError(t, err)
	flaky, fine, a1, a2 := ids[0], ids[1], ids[2], ids[3]

	left := newEachPublisher("left", nil)
	right := newEachPublisher("right", func(e outbox.Event, attempt int) bool {
		return (e.ID == flaky && attempt <= 2) || e.EventType == "test.order_placed"
	})
	const maxRetries = 3
	f := startForwarder(t, db, events.ForwarderConfig{
		Publishers: []outbox.Publisher{left, right}, MaxRetries: maxRetries, SweepInterval: 50 * time.Millisecond,
		RetryBackoffMin: 20 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
	})
	pgtest.WaitFor(t, 20*time.Second, "every row settled", func() (bool, error) {
		return outboxRow(t, db, flaky).Status == events.StatusSent && outboxRow(t, db, fine).Status == events.StatusSent &&
			outboxRow(t, db, a1).Status == events.StatusFailed && outboxRow(t, db, a2).Status == events.StatusSent, nil
	})

	_, leftAttempts, _ := left.snapshot()
	require.Equal(t, map[string]int{flaky: 1, fine: 1, a1: 1, a2: 1}, leftAttempts, "what left confirmed is never handed to it again")
	handed, rightAttempts, rightAccepted := right.snapshot()
	require.Equal(t, map[string]int{flaky: 3, fine: 1, a1: maxRetries, a2: 1}, rightAttempts)
	require.Equal(t, map[string]int{flaky: 1, fine: 1, a2: 1}, rightAccepted)
	var a1Last, a2First int
	for i, id := range handed {
		if id == a1 {
			a1Last = i
		}
		if id == a2 && a2First == 0 {
			a2First = i
		}
	}
	require.Greater(t, a2First, a1Last, "right got A's second event only after the first was settled: %v", handed)

	st := outboxRow(t, db, flaky)
	require.Equal(t, 2, st.Retries)
	require.Empty(t, st.LastError)
	require.ElementsMatch(t, []string{"left", "right"}, st.Delivered)
	st = outboxRow(t, db, a1)
	require.Equal(t, maxRetries, st.Retries)
	require.Contains(t, st.LastError, "right: refused test.order_placed")
	require.NotContains(t, st.LastError, "left")
	require.Equal(t, []string{"left"}, st.Delivered)
	require.Zero(t, outboxRow(t, db, a2).Retries, "a held-back event is not charged")
	require.Zero(t, outboxRow(t, db, fine).Retries)
	require.Equal(t, int64(2+maxRetries), f.Stats().Failures)
}

// TestForwarderBackoff: a failing row is retried after RetryBackoffMin,
// doubling, at most RetryBackoffMax, and is not claimable meanwhile.
func TestForwarderBackoff(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	em := newEmitter(t, db)
	id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
	require.NoError(t, err)
	pub := newWatchPublisher()
	pub.failures.Store(100)
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
		Schema: db.Schema, Publishers: []outbox.Publisher{pub}, MaxRetries: 5,
		RetryBackoffMin: time.Hour, RetryBackoffMax: 3 * time.Hour,
	})
	require.NoError(t, err)
	var waits []time.Duration
	for range 4 {
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_outbox SET next_attempt_at = NULL WHERE id = $1`), id)
		require.NoError(t, err)
		before := time.Now()
		_, err = f.ForwardOnce(ctx)
		require.ErrorContains(t, err, "broker unavailable")
		st := outboxRow(t, db, id)
		require.NotNil(t, st.NextAttempt)
		waits = append(waits, st.NextAttempt.Sub(before).Round(time.Hour))
		_, err = f.ForwardOnce(ctx)
		require.NoError(t, err, "the row waits for its backoff")
		require.Equal(t, events.StatusPending, outboxRow(t, db, id).Status)
	}
	require.Equal(t, []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour, 3 * time.Hour}, waits)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_outbox SET next_attempt_at = NULL WHERE id = $1`), id)
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.Error(t, err)
	st := outboxRow(t, db, id)
	require.Equal(t, events.StatusFailed, st.Status)
	require.Nil(t, st.NextAttempt)
}

// refusingTx is a transactional publisher that refuses one event.
type refusingTx struct {
	bad string
}

func (p *refusingTx) Name() string { return "picky-tx" }

func (p *refusingTx) PublishOutbox(context.Context, []outbox.Event) error {
	return errors.New("not used")
}

func (p *refusingTx) PublishOutboxTx(ctx context.Context, tx pgx.Tx, evs []outbox.Event) (func(context.Context), error) {
	for _, e := range evs {
		if e.ID == p.bad {
			return nil, fmt.Errorf("cannot take event %s", e.ID)
		}
	}
	return nil, nil
}

var _ outbox.TxPublisher = (*refusingTx)(nil)

// TestForwarderTxPublisherRefusesOneEvent: a transactional publisher's
// error for one event fails that event alone; its batch-mates are sent.
func TestForwarderTxPublisherRefusesOneEvent(t *testing.T) {
	t.Parallel()
	withAndWithoutPlain(t, func(t *testing.T, plain []outbox.Publisher) {
		db := pgtest.New(t)
		ctx := context.Background()
		em := newEmitter(t, db)
		ids, err := em.EmitMany(ctx, db.Pool, []events.Emission{
			{Def: noteEvent, Payload: noteV1{Text: "1"}},
			{Def: noteEvent, Payload: noteV1{Text: "2"}, Meta: events.Meta{AggregateID: "A"}},
			{Def: noteEvent, Payload: noteV1{Text: "3"}},
			{Def: noteEvent, Payload: noteV1{Text: "4"}, Meta: events.Meta{AggregateID: "A"}},
			{Def: noteEvent, Payload: noteV1{Text: "5"}, Meta: events.Meta{AggregateID: "B"}},
		})
		require.NoError(t, err)
		bad := ids[1]
		pubs := append([]outbox.Publisher{&refusingTx{bad: bad}}, plain...)
		startForwarder(t, db, events.ForwarderConfig{
			Publishers: pubs, MaxRetries: 3, SweepInterval: 50 * time.Millisecond, RetryBackoffMin: 10 * time.Millisecond,
		})
		pgtest.WaitFor(t, 20*time.Second, "the refused event FAILED and the rest SENT", func() (bool, error) {
			for _, id := range ids {
				want := events.StatusSent
				if id == bad {
					want = events.StatusFailed
				}
				if outboxRow(t, db, id).Status != want {
					return false, nil
				}
			}
			return true, nil
		})
		st := outboxRow(t, db, bad)
		require.Equal(t, 3, st.Retries)
		require.Contains(t, st.LastError, "picky-tx")
		require.Contains(t, st.LastError, "cannot take event "+bad)
		for _, id := range ids {
			if id != bad {
				require.Zero(t, outboxRow(t, db, id).Retries, "event %s was not charged for its batch-mate", id)
			}
		}
	})
}

// panickyPublisher panics on every call.
type panickyPublisher struct{}

func (panickyPublisher) Name() string { return "panicky" }

func (panickyPublisher) PublishOutbox(context.Context, []outbox.Event) error { panic("boom") }

// TestForwarderPublisherPanic: a panicking plain publisher is a failed
// attempt, recorded with the panic's value.
func TestForwarderPublisherPanic(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	id, err := newEmitter(t, db).Emit(ctx, db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
	require.NoError(t, err)
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Publishers: []outbox.Publisher{panickyPublisher{}}})
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.ErrorContains(t, err, "panicked: boom")
	st := outboxRow(t, db, id)
	require.Equal(t, events.StatusPending, st.Status)
	require.Equal(t, 1, st.Retries)
	require.Contains(t, st.LastError, "panicky: publisher panicked: boom")
}

// TestForwarderConfigErrors: publishers must have distinct names.
func TestForwarderConfigErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema,
		Publishers: []outbox.Publisher{newEachPublisher("x", nil), newEachPublisher("x", nil)}})
	require.ErrorContains(t, err, `two forwarder publishers are named "x"`)
	_, err = events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema,
		Publishers: []outbox.Publisher{newEachPublisher("x", nil)}, PublishTimeout: -time.Second})
	require.ErrorContains(t, err, "PublishTimeout -1s")
}

// TestForwarderPublishTimeout: a plain publisher that never confirms is cut
// off after PublishTimeout; the batch counts as failed for it and is
// retried later, and the forwarder goes on.
func TestForwarderPublishTimeout(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	id, err := newEmitter(t, db).Emit(ctx, db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
	require.NoError(t, err)
	pub := &ctxPublisher{entered: make(chan struct{}, 1)}
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Publishers: []outbox.Publisher{pub},
		PublishTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := f.ForwardOnce(ctx); done <- err }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "ctx-bound: context deadline exceeded")
	case <-time.After(10 * time.Second): // a liveness bound, far above the 100 ms timeout
		t.Fatal("the publish was not cut off by PublishTimeout")
	}
	st := outboxRow(t, db, id)
	require.Equal(t, events.StatusPending, st.Status)
	require.Equal(t, 1, st.Retries)
	require.NotNil(t, st.NextAttempt)
}

// settingsTx is a transactional publisher that records, per batch, the
// claim transaction's planner settings it publishes in.
type settingsTx struct {
	mu   sync.Mutex
	seen []string
}

func (p *settingsTx) Name() string { return "settings-tx" }

func (p *settingsTx) PublishOutbox(context.Context, []outbox.Event) error {
	return errors.New("not used")
}

func (p *settingsTx) PublishOutboxTx(ctx context.Context, tx pgx.Tx, evs []outbox.Event) (func(context.Context), error) {
	var settings string
	err := tx.QueryRow(ctx, `SELECT concat_ws(' ', current_setting('enable_bitmapscan'), current_setting('plan_cache_mode'),
	    current_setting('enable_seqscan'))`).Scan(&settings)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.seen = append(p.seen, settings)
	p.mu.Unlock()
	return nil, nil
}

func (p *settingsTx) settings() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// TestForwarderClaimTxSettings: the claim's transaction (one transaction, and
// with a plain publisher) plans its statements after the candidates'
// select without bitmap scans and with custom plans, sequential scans
// allowed again (the candidates' select ran with its generic plan, made
// without them).
func TestForwarderClaimTxSettings(t *testing.T) {
	t.Parallel()
	withAndWithoutPlain(t, func(t *testing.T, plain []outbox.Publisher) {
		db := pgtest.New(t)
		ids := emitLane(t, db, "A", "1", "2")
		pub := &settingsTx{}
		pubs := append([]outbox.Publisher{pub}, plain...)
		startForwarder(t, db, events.ForwarderConfig{Publishers: pubs, SweepInterval: 50 * time.Millisecond})
		pgtest.WaitFor(t, 20*time.Second, "every event SENT", func() (bool, error) {
			for _, id := range ids {
				if outboxRow(t, db, id).Status != events.StatusSent {
					return false, nil
				}
			}
			return true, nil
		})
		seen := pub.settings()
		require.NotEmpty(t, seen)
		for _, s := range seen {
			require.Equal(t, "off force_custom_plan on", s)
		}
	})
}

// withAndWithoutPlain runs test twice in parallel: with plain (one plain
// publisher) empty, so the forwarder publishes in one transaction, and with
// a plain publisher, so it claims first.
func withAndWithoutPlain(t *testing.T, test func(t *testing.T, plain []outbox.Publisher)) {
	for _, withPlain := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithPlain=%v", withPlain), func(t *testing.T) {
			t.Parallel()
			var plain []outbox.Publisher
			if withPlain {
				plain = append(plain, newEachPublisher("plain", nil))
			}
			test(t, plain)
		})
	}
}
