package amqpbridge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

type orderPlaced struct {
	ID int `json:"id"`
}

var orderPlacedEvent = events.Define[orderPlaced]("order.placed", nil)

type note struct {
	Text string `json:"text"`
}

// noteEvent and orderForwardedEvent are the two event types of
// TestOutboundUnroutableFailsAlone: the exchange is bound for the first only.
var (
	noteEvent           = events.Define[note]("test.note", nil)
	orderForwardedEvent = events.Define[orderPlaced]("test.order_placed", &events.EventOpts{EventKind: events.EventKindIntegration})
)

// TestOutboundBehindTheForwarder runs the whole outbound path: an event
// emitted into the outbox is forwarded by the events forwarder to the
// Outbound publisher, arrives on a queue bound to the exchange by its event
// type, and its outbox row is SENT (which the forwarder does only once every
// publisher, here after the broker's confirm, accepted it).
func TestOutboundBehindTheForwarder(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)
	db := pgtest.New(t)
	exchange := amqptest.UniqueName("tributary-outbound")
	qname := amqptest.UniqueName("outbound-sink")
	t.Cleanup(func() {
		if c, err := amqptest.Conn(t).Channel(); err == nil {
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	amqptest.DeleteQueuesOnCleanup(t, conn, qname)

	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("tributary-test"), Logger: pgtest.Logger(t)}
	pub, err := amqpbridge.NewPublisher(cfg)
	require.NoError(t, err)
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: exchange})
	require.NoError(t, err)
	// The exchange and a queue for order events exist before anything is
	// forwarded (the outbound side declares the exchange too).
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(qname, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(qname, "order.*", exchange, false, nil))

	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, rt.AddService(pub)) // before the forwarder: stopped after it
		_, err := events.Install(rt, events.InstallConfig{Forwarder: events.ForwarderConfig{Publishers: []outbox.Publisher{out}}})
		require.NoError(t, err)
	})

	reg, err := events.NewRegistry(orderPlacedEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	id, err := em.Emit(context.Background(), db.Pool, orderPlacedEvent, orderPlaced{ID: 7}, events.Meta{AggregateID: "order-7"})
	require.NoError(t, err)

	d := amqptest.Get(t, ch, qname, 30*time.Second)
	require.Equal(t, id, d.MessageId)
	require.Equal(t, "order.placed", d.RoutingKey)
	require.JSONEq(t, `{"id":7}`, string(d.Body))
	require.Equal(t, "order-7", d.Headers[amqpbridge.HeaderAggregateID])

	amqptest.Eventually(t, 10*time.Second, "outbox row SENT", func() bool {
		var status string
		require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q("SELECT status FROM /*schema*/tributary_outbox WHERE id = $1"), id).Scan(&status))
		return status == "SENT"
	})
}

// The outbound bridge reports an outcome per event to the forwarder.
var _ outbox.EventPublisher = (*amqpbridge.Outbound)(nil)

// attemptRecorder wraps a destination and records when each event was
// handed to it.
type attemptRecorder struct {
	outbox.Publisher
	mu       sync.Mutex
	attempts map[string][]time.Time
}

func (r *attemptRecorder) record(evs []outbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range evs {
		r.attempts[e.ID] = append(r.attempts[e.ID], time.Now())
	}
}

func (r *attemptRecorder) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	r.record(evs)
	return r.Publisher.PublishOutbox(ctx, evs)
}

// PublishOutboxEvents passes the per-event outcomes of the wrapped
// Outbound through.
func (r *attemptRecorder) PublishOutboxEvents(ctx context.Context, evs []outbox.Event) []error {
	r.record(evs)
	return r.Publisher.(outbox.EventPublisher).PublishOutboxEvents(ctx, evs)
}

func (r *attemptRecorder) times(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.attempts[id]...)
}

// TestOutboundUnroutableFailsAlone: an unroutable message fails alone. With
// the exchange bound for test.note only, one test.order_placed and one
// test.note forwarded in the same batch. The bus consumer gets both at once
// (the bus does not wait for the broker), the bound queue gets test.note
// exactly once, and only the unroutable row is retried, with growing gaps,
// until it is FAILED with a reason that says it is unroutable.
func TestOutboundUnroutableFailsAlone(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)
	db := pgtest.New(t)
	ctx := context.Background()
	exchange := amqptest.UniqueName("tributary-outbound")
	qname := amqptest.UniqueName("outbound-notes")
	t.Cleanup(func() {
		if c, err := amqptest.Conn(t).Channel(); err == nil {
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	amqptest.DeleteQueuesOnCleanup(t, conn, qname)
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil))
	_, err := ch.QueueDeclare(qname, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(qname, "test.note", exchange, false, nil))

	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("tributary-test"), Logger: pgtest.Logger(t)}
	pub, err := amqpbridge.NewPublisher(cfg)
	require.NoError(t, err)
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: exchange})
	require.NoError(t, err)
	rec := &attemptRecorder{Publisher: out, attempts: map[string][]time.Time{}}

	// Both events in one transaction, before the forwarder starts: one batch.
	reg, err := events.NewRegistry(noteEvent, orderForwardedEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	ids, err := em.EmitMany(ctx, db.Pool, []events.Emission{
		{Def: orderForwardedEvent, Payload: orderPlaced{ID: 1}, Meta: events.Meta{AggregateID: "o-1"}},
		{Def: noteEvent, Payload: note{Text: "hello"}},
	})
	require.NoError(t, err)
	orderID, noteID := ids[0], ids[1]

	var mu sync.Mutex
	handled := map[string]int{}
	consumer, err := events.NewConsumer(events.ConsumerConfig{Name: "bus-side"})
	require.NoError(t, err)
	events.On(consumer, orderForwardedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		return nil
	})
	events.On(consumer, noteEvent, func(ctx context.Context, m events.Message[note]) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		return nil
	})
	const maxRetries = 4
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, rt.AddService(pub))
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{consumer}, Forwarder: events.ForwarderConfig{
			Publishers: []outbox.Publisher{rec}, MaxRetries: maxRetries, SweepInterval: 50 * time.Millisecond,
			RetryBackoffMin: 200 * time.Millisecond, RetryBackoffMax: 5 * time.Second, // gaps of 200, 400, 800 ms plus at most one 50 ms poll
		}})
		require.NoError(t, err)
	})

	amqptest.Eventually(t, 10*time.Second, "the bus consumer to get both events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled[orderID] == 1 && handled[noteID] == 1
	})
	status := func(id string) (s string, retries int, lastError string) {
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT status, retry_count, coalesce(last_error, '') FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&s, &retries, &lastError))
		return s, retries, lastError
	}
	amqptest.Eventually(t, 30*time.Second, "the unroutable row to end FAILED", func() bool {
		s, _, _ := status(orderID)
		return s == "FAILED"
	})
	_, retries, lastError := status(orderID)
	require.Equal(t, maxRetries, retries)
	require.Contains(t, lastError, "unroutable")
	require.Contains(t, lastError, "test.order_placed")
	s, retries, _ := status(noteID)
	require.Equal(t, "SENT", s)
	require.Zero(t, retries, "the routable event was not charged for its batch-mate")

	d := amqptest.Get(t, ch, qname, 10*time.Second)
	require.Equal(t, noteID, d.MessageId)
	require.Zero(t, amqptest.Depth(t, ch, qname), "test.note reached the bound queue exactly once")
	require.Len(t, rec.times(noteID), 1, "a confirmed row is not published to its destination again")

	gaps := rec.times(orderID)
	require.Len(t, gaps, maxRetries)
	for i := 1; i < len(gaps); i++ {
		t.Logf("attempt %d of the unroutable event: %s after the one before", i+1, gaps[i].Sub(gaps[i-1]).Round(time.Millisecond))
	}
	// The backoff is a floor: attempt i+1 comes no sooner than 200 ms·2^(i-1)
	// after attempt i. A loaded machine can only make a gap longer, so the
	// gaps are checked against their floors, not against each other.
	for i := 1; i < len(gaps); i++ {
		floor := 200 * time.Millisecond << (i - 1)
		require.GreaterOrEqual(t, gaps[i].Sub(gaps[i-1]), floor-10*time.Millisecond, "retry %d backs off at least %s: %v", i+1, floor, gaps)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, handled[orderID], "the bus got the unroutable event once, whatever its retries")
	require.Equal(t, 1, handled[noteID])
}
