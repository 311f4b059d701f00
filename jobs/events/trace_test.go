package events_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// One trace from the transaction that emits an event, through the consumer's
// handler (in a River job), to the AMQP message the handler publishes and
// the handler of that message in another consumer: every span a child of
// the one before, across the outbox, the job and the broker. The span names
// are logged (-v).
func TestTraceFromEmitToHandlerToAMQP(t *testing.T) {
	// Not parallel: it sets the global tracer provider, which the River
	// middleware of runtimes created meanwhile would capture.
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})

	db := pgtest.New(t)
	bcfg := amqpbridge.Config{URL: amqptest.URL(), QueuePrefix: amqptest.UniqueName("trace"), ConnectionName: amqptest.UniqueName("tributary-trace")}
	pub, err := amqpbridge.NewPublisher(bcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })

	// The handler's message is consumed by an AMQP consumer that records
	// the context its handler runs in.
	consumed := make(chan trace.SpanContext, 1)
	ac, err := amqpbridge.NewConsumer(bcfg, amqpbridge.ConsumerConfig{Queue: "receipts", Handler: func(ctx context.Context, d *amqpbridge.Delivery) error {
		consumed <- trace.SpanContextFromContext(ctx)
		return nil
	}})
	require.NoError(t, err)
	conn := amqptest.Conn(t)
	topo := ac.Topology()
	names := []string{topo.Main, topo.Failed}
	for _, r := range topo.Retry {
		names = append(names, r.Queue)
	}
	amqptest.DeleteQueuesOnCleanup(t, conn, names...)
	require.NoError(t, ac.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ac.Stop(ctx)
	})

	billing := fastConsumer(t, "billing", nil)
	handled := make(chan trace.SpanContext, 1)
	events.On(billing, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
		handled <- trace.SpanContextFromContext(ctx)
		return pub.Publish(ctx, "", topo.Main, amqp.Publishing{ContentType: "application/json", Body: []byte(`{"order_id":"` + m.Payload.OrderID + `"}`)})
	})
	startEvents(t, db, events.ForwarderConfig{}, billing)

	// The application's own span around its transaction.
	em := newEmitter(t, db)
	ctx, root := tp.Tracer("app").Start(context.Background(), "place order")
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := em.EmitTx(ctx, tx, orderPlacedEvent, orderPlaced{OrderID: "o-1", Amount: 3}, events.Meta{AggregateID: "o-1"})
		return err
	})
	require.NoError(t, err)
	root.End()
	traceID := root.SpanContext().TraceID()

	var handlerSC, consumerSC trace.SpanContext
	select {
	case handlerSC = <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run within 30s")
	}
	select {
	case consumerSC = <-consumed:
	case <-time.After(30 * time.Second):
		t.Fatal("the AMQP consumer did not get the handler's message within 30s")
	}
	require.Equal(t, traceID, handlerSC.TraceID(), "the handler runs in the emitting transaction's trace")
	require.Equal(t, traceID, consumerSC.TraceID(), "the AMQP consumer runs in the same trace")

	// Wait until every span of the chain has ended (spans are exported when
	// they end: the handler's after its publish returned), from the AMQP
	// consumer's span up to the root.
	var spans tracetest.SpanStubs
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var chain []string
	pgtest.WaitFor(t, 10*time.Second, "the spans of the chain to end", func() (bool, error) {
		spans = exporter.GetSpans()
		clear(byID)
		for _, s := range spans {
			byID[s.SpanContext.SpanID()] = s
		}
		chain = chain[:0]
		for id := consumerSC.SpanID(); id.IsValid(); {
			s, ok := byID[id]
			if !ok {
				return false, fmt.Errorf("span %s not exported yet", id)
			}
			if s.SpanContext.TraceID() != traceID {
				return false, fmt.Errorf("span %s is in trace %s", s.Name, s.SpanContext.TraceID())
			}
			chain = append([]string{fmt.Sprintf("%s (%s)", s.Name, s.SpanKind)}, chain...)
			id = s.Parent.SpanID()
		}
		return true, nil
	})
	t.Logf("the trace, root first:\n  %s", strings.Join(chain, "\n  "))
	require.Equal(t, []string{
		"place order (internal)",
		"tributary.emit " + orderPlacedEvent.Name() + " (producer)",
		"tributary.handle " + orderPlacedEvent.Name() + " (consumer)",
		"publish " + topo.Main + " (producer)",
		"process " + topo.Main + " (consumer)",
	}, chain)
	require.Equal(t, handlerSC.SpanID(), byID[byID[consumerSC.SpanID()].Parent.SpanID()].Parent.SpanID(),
		"the publish span is the handler's child")

	// The handler span links to River's work span of its dispatch job, and
	// every River job worked got one.
	handle := byID[handlerSC.SpanID()]
	require.Len(t, handle.Links, 1)
	var work tracetest.SpanStub
	pgtest.WaitFor(t, 10*time.Second, "the linked River work span to end", func() (bool, error) {
		spans = exporter.GetSpans()
		for _, s := range spans {
			if s.SpanContext.SpanID() == handle.Links[0].SpanContext.SpanID() {
				work = s
				return true, nil
			}
		}
		return false, nil
	})
	require.Equal(t, "river.work/"+events.DispatchKind, work.Name)
	var all []string
	for _, s := range spans {
		if s.SpanContext.TraceID() == traceID || strings.HasPrefix(s.Name, "river.") {
			all = append(all, s.Name)
		}
	}
	t.Logf("spans of the trace and River's: %s", strings.Join(all, ", "))
}

// Without a tracer provider, events carry no trace context.
func TestNoTraceContextWithoutTracerProvider(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	em := newEmitter(t, db)
	id, err := em.Emit(context.Background(), db.Pool, orderPlacedEvent, orderPlaced{OrderID: "o-2", Amount: 1}, events.Meta{})
	require.NoError(t, err)
	var md string
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT metadata::text FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&md))
	require.NotContains(t, md, "traceparent")
}
