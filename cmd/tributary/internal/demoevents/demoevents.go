// Package demoevents holds the demo events of the worker binary and the CLI:
// the demo.* event types, a consumer that logs every demo.* event and fails
// on request, and a producer that emits a demo event now and then for
// `tributary worker --demo`.
package demoevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// Note is the payload of demo.note.
type Note struct {
	Text string `json:"text"`
	// Fail makes the demo consumer's handler fail (and retry, then give up).
	Fail bool `json:"fail,omitempty"`
	// SleepMS makes the demo consumer's handler take that long (or until
	// its context ends), for reliability tests that need a slow dispatch.
	SleepMS int `json:"sleep_ms,omitempty"`
}

// OrderPlaced is the payload of demo.order_placed.
type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Fail    bool   `json:"fail,omitempty"`
}

// Validate rejects orders without an id or with a negative amount.
func (o OrderPlaced) Validate() error {
	if o.OrderID == "" {
		return errors.New("order_id is required")
	}
	if o.Amount < 0 {
		return fmt.Errorf("amount %d must not be negative", o.Amount)
	}
	return nil
}

// The demo event types.
var (
	NoteEvent        = events.Define[Note]("demo.note", nil)
	OrderPlacedEvent = events.Define[OrderPlaced]("demo.order_placed", &events.EventOpts{EventKind: events.EventKindIntegration})
)

// Registry returns a registry of the demo events.
func Registry() *events.Registry {
	r, err := events.NewRegistry(NoteEvent, OrderPlacedEvent)
	if err != nil {
		panic(err) // two fixed, distinct names
	}
	return r
}

// ConsumerName is the demo consumer's name.
const ConsumerName = "demo.logger"

// ErrRequestedFailure is what the demo handler returns for {"fail": true}.
var ErrRequestedFailure = errors.New("demo consumer: failing as the payload asked")

// NewConsumer returns the demo consumer: subscribed to demo.*, it logs each
// event, sleeps for "sleep_ms" when the payload has it, and fails when the
// payload has "fail": true. It uses the skip policy, so a failed demo event
// does not hold its aggregate.
func NewConsumer() (*events.Consumer, error) {
	c, err := events.NewConsumer(events.ConsumerConfig{Name: ConsumerName, Ordering: events.OrderingSkip})
	if err != nil {
		return nil, err
	}
	err = c.Subscribe(events.HandleRaw("demo.*", func(ctx context.Context, m events.Message[json.RawMessage]) error {
		var probe struct {
			Fail    bool `json:"fail"`
			SleepMS int  `json:"sleep_ms"`
		}
		_ = json.Unmarshal(m.Payload, &probe)
		if probe.SleepMS > 0 {
			t := time.NewTimer(time.Duration(probe.SleepMS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		events.Logger(ctx).InfoContext(ctx, "demo event", "payload", string(m.Payload))
		if probe.Fail {
			return ErrRequestedFailure
		}
		return nil
	}))
	return c, err
}

// Producer emits one demo.order_placed event per interval (default 5 s),
// cycling over a few aggregates. It is a queue.Service.
type Producer struct {
	pool     *pgxpool.Pool
	emitter  *events.Emitter
	interval time.Duration
	logger   *slog.Logger
	life     queue.Lifecycle
}

// NewProducer returns a demo event producer.
func NewProducer(pool *pgxpool.Pool, schema string, interval time.Duration, logger *slog.Logger) (*Producer, error) {
	em, err := events.NewEmitter(events.EmitterConfig{Schema: schema, Registry: Registry(), SourceService: "demo"})
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = 5 * time.Second
	}
	return &Producer{pool: pool, emitter: em, interval: interval, logger: logger}, nil
}

// Name implements queue.Service.
func (p *Producer) Name() string { return "demo event producer" }

// Start starts emitting.
func (p *Producer) Start(ctx context.Context) error {
	return p.life.Start(ctx, p.Name(), func(run *queue.Run) error {
		run.Go(func() { p.loop(run.Stopping()) })
		return nil
	})
}

// Stop stops emitting.
func (p *Producer) Stop(ctx context.Context) error {
	_, err := p.life.Stop(ctx)
	return err
}

func (p *Producer) loop(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		order := OrderPlaced{OrderID: fmt.Sprintf("order-%d", i%5), Amount: i}
		_, err := p.emitter.Emit(ctx, p.pool, OrderPlacedEvent, order,
			events.Meta{AggregateID: order.OrderID, CorrelationID: fmt.Sprintf("demo-%d", i), Actor: "demo-producer"})
		if err != nil && ctx.Err() == nil {
			p.logger.WarnContext(ctx, "demo event producer could not emit", "error", err)
		}
	}
}
