package amqpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// EventInserterConfig configures EventInserter.
type EventInserterConfig struct {
	// EventType is the type of a message whose AMQP type property is empty.
	// Empty: such a message is a permanent failure (it goes to
	// "{name}.failed"), since no consumer could be chosen for it.
	EventType string
	// EventVersion of a message without an event_version header. Defaults
	// to 1.
	EventVersion int
	// Now is the clock for messages without a timestamp. Defaults to
	// time.Now.
	Now func() time.Time
}

// EventInserter returns an InsertBatchFunc that hands each delivery to an
// event bus as one event (for tributary's in-database bus,
// events.Installation.Bus: every consumer subscribed to its type gets it,
// with the consumer's retries, batching and per-aggregate ordering), in
// the inserting transaction, so the message is acked only once its
// dispatches committed. It is the inverse of the outbound bridge's
// message (NewOutbound):
//
//   - id: the message id, else the event_id header, else a new UUIDv7 (a
//     redelivered message without an id then carries another one);
//   - type: the AMQP type property, else cfg.EventType;
//   - payload: the body, which must be JSON in UTF-8;
//   - the event_version, event_kind (default "integration"),
//     aggregate_id, causation_id, actor and source_service headers, the
//     correlation id, the traceparent and tracestate headers, and every
//     x-meta-NAME string header as the metadata's extra NAME;
//   - created at: the message timestamp, else now.
//
// A message that cannot become an event (an empty body, one that is not
// JSON or not UTF-8, no type, a header of the wrong type, text PostgreSQL
// cannot hold) is a permanent failure, named with its message id; the
// rest of its batch is inserted without it. With the in-database bus a
// consumer's events without an aggregate go in batched dispatch jobs (one
// River job per ConsumerConfig.DispatchBatch events), so a message costs
// far less than the one River job per message of JobInserter.
//
// Events of one aggregate keep the order in which their inserting
// transactions reserved their lane; with InboundConfig.Concurrency above 1
// two batches can reserve out of queue order, so set Concurrency to 1
// where a queue's messages of one aggregate must keep their queue order.
// An event no consumer subscribes to is dropped with its message's ack,
// as the bus drops an outbox event nobody subscribes to.
func EventInserter(bus outbox.TxPublisher, cfg EventInserterConfig) InsertBatchFunc {
	if cfg.EventVersion == 0 {
		cfg.EventVersion = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error {
		evs := make([]outbox.Event, len(batch))
		for i, d := range batch {
			if err := deliveryEvent(d, cfg, &evs[i]); err != nil {
				if len(batch) == 1 {
					return Permanent(err)
				}
				// insertBatch tries each delivery alone, naming the bad ones.
				return Permanent(fmt.Errorf("a message of the batch of %d: %w", len(batch), err))
			}
		}
		after, err := bus.PublishOutboxTx(ctx, tx, evs)
		if err != nil {
			return fmt.Errorf("error handing %d messages to %s: %w", len(evs), bus.Name(), err)
		}
		if after != nil {
			OnCommit(ctx, after)
		}
		return nil
	}
}

// deliveryEvent fills ev from d (EventInserter's mapping).
func deliveryEvent(d *Delivery, cfg EventInserterConfig, ev *outbox.Event) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("message %q cannot be an event: %s", d.MessageID, fmt.Sprintf(format, args...))
	}
	switch {
	case len(d.Body) == 0:
		return bad("the body is empty, not JSON")
	case !utf8.Valid(d.Body):
		return bad("the body is not UTF-8")
	case !json.Valid(d.Body):
		return bad("the body is not JSON")
	}
	h := d.Headers
	str := func(name string) (string, error) {
		switch v := h[name].(type) {
		case nil:
			return "", nil
		case string:
			if err := queue.CheckText(v); err != nil {
				return "", bad("header %s: %v", name, err)
			}
			return v, nil
		default:
			return "", bad("header %s is a %T, not a string", name, v)
		}
	}
	*ev = outbox.Event{ID: d.MessageID, EventType: d.Type, Payload: d.Body, CreatedAt: d.Timestamp, EventVersion: cfg.EventVersion}
	var err error
	if ev.ID == "" {
		if ev.ID, err = str(HeaderEventID); err != nil {
			return err
		}
		if ev.ID == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("error making an event id: %w", err)
			}
			ev.ID = id.String()
		}
	}
	if ev.EventType == "" {
		ev.EventType = cfg.EventType
	}
	if ev.EventType == "" {
		return bad("it has no type property and the inserter no EventType")
	}
	for _, f := range []struct {
		name string
		s    string
	}{{"message id", ev.ID}, {"type", ev.EventType}, {"correlation id", d.CorrelationID}} {
		if err := queue.CheckText(f.s); err != nil {
			return bad("%s: %v", f.name, err)
		}
	}
	if v, ok := h[HeaderEventVersion]; ok {
		if ev.EventVersion, ok = headerInt(v); !ok || ev.EventVersion < 1 {
			return bad("header %s is %v (%T), not a positive integer", HeaderEventVersion, v, v)
		}
	}
	fields := []struct {
		header string
		to     *string
	}{
		{HeaderEventKind, &ev.EventKind}, {HeaderAggregateID, &ev.AggregateID}, {HeaderSourceService, &ev.SourceService},
		{HeaderCausationID, &ev.Metadata.CausationID}, {HeaderActor, &ev.Metadata.Actor},
		{HeaderTraceParent, &ev.Metadata.TraceParent}, {HeaderTraceState, &ev.Metadata.TraceState},
	}
	for _, f := range fields {
		if *f.to, err = str(f.header); err != nil {
			return err
		}
	}
	switch ev.EventKind {
	case "":
		ev.EventKind = "integration"
	case "domain", "integration":
	default:
		return bad("header %s is %q, not domain or integration", HeaderEventKind, ev.EventKind)
	}
	ev.Metadata.CorrelationID = d.CorrelationID
	for k := range h {
		name, ok := strings.CutPrefix(k, "x-meta-")
		if !ok {
			continue
		}
		v, err := str(k)
		if err != nil {
			return err
		}
		if err := queue.CheckText(name); err != nil {
			return bad("header name %q: %v", k, err)
		}
		if ev.Metadata.Extra == nil {
			ev.Metadata.Extra = map[string]string{}
		}
		ev.Metadata.Extra[name] = v
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = cfg.Now()
	}
	ev.CreatedAt = ev.CreatedAt.UTC()
	return nil
}

// headerInt reads an integer header whatever integer type (or decimal
// string) the publisher used.
func headerInt(v any) (int, bool) {
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int8:
		n = int64(v)
	case int16:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	case string:
		p, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return 0, false
		}
		n = p
	case amqp.Decimal:
		if v.Scale != 0 {
			return 0, false
		}
		n = int64(v.Value)
	default:
		return 0, false
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, false
	}
	return int(n), true
}

type commitHooksKey struct{}

type commitHooks struct{ fns []func(context.Context) }

// OnCommit registers fn to run once the inserting transaction of the
// InsertBatchFunc that received ctx committed (never after a roll back):
// what must not happen inside it, such as a NOTIFY, which in a writing
// transaction would hold PostgreSQL's notify lock through the commit. It
// reports false, and fn is not kept, where ctx is not an inserter's.
func OnCommit(ctx context.Context, fn func(context.Context)) bool {
	hooks, ok := ctx.Value(commitHooksKey{}).(*commitHooks)
	if ok {
		hooks.fns = append(hooks.fns, fn)
	}
	return ok
}
