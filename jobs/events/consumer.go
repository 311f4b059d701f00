package events

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/outbox"
)

// Ordering is what a consumer does with the events of an aggregate queued
// behind one whose dispatch failed for good (retries used up, or a
// validation failure).
type Ordering string

const (
	// OrderingBlock holds the rest of the aggregate's events until the
	// failed dispatch is retried (`tributary jobs retry ID`) and succeeds.
	// No event of the aggregate is ever handled before an earlier one. The
	// default.
	OrderingBlock Ordering = "block"
	// OrderingSkip lets the next event of the aggregate run as soon as the
	// failed one is given up; the failed dispatch stays replayable, but a
	// replay then runs out of order.
	OrderingSkip Ordering = "skip"
)

// RetryDelaysDefault returns a consumer's delays between attempts when it
// sets none: 1 s, 5 s, 15 s, so three retries, then the dispatch is
// discarded.
func RetryDelaysDefault() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 15 * time.Second}
}

// QueueDefault is the queue of a consumer that names none: event dispatch
// has a queue of its own.
const QueueDefault = "events"

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Name identifies the consumer across processes and services. Every
	// consumer gets its own copy of each event it subscribes to. Required.
	Name string

	// Queue is the River queue its dispatch jobs go to, so a burst of
	// events takes that queue's slots and not those of plain jobs. It must
	// be a name River accepts (at most 64 lower-case letters and digits,
	// separated by single _ or -): NewConsumer refuses any other. The
	// runtime Install is given must work it (see InstallConfig.SkipQueueCheck).
	//
	// Defaults to QueueDefault ("events").
	Queue string

	// RetryDelays are the waits before each retry of a failing handler; when
	// they are used up the dispatch is discarded (replayable with
	// `tributary jobs retry`).
	//
	// Defaults to 1 s, 5 s, 15 s.
	RetryDelays []time.Duration

	// Ordering is the failure policy for the events of an aggregate behind
	// a failed one. Defaults to OrderingBlock.
	Ordering Ordering

	// SourceService names the service the consumer runs in. With
	// SkipOwnEventKinds, events that service emitted with those kinds are
	// not delivered to this consumer.
	SourceService string

	// SkipOwnEventKinds are the kinds of its own service's events the
	// consumer does not want (e.g. EventKindIntegration: it published them for
	// others). Defaults to none.
	SkipOwnEventKinds []EventKind

	// OnProcessedFunc, when set, is called after every dispatch attempt with
	// its outcome. It must not block for long.
	OnProcessedFunc func(ctx context.Context, p Processed)

	// DispatchBatch is the most of the consumer's events without an
	// aggregate that one dispatch job carries. The forwarder groups the
	// events of each batch it forwards (so a quiet outbox still gives jobs
	// of one or two events), and the job runs their handlers one after
	// another. It saves a River job per event, which is most of the cost of
	// an event whose handler is fast. An event that fails leaves the batch
	// as a dispatch job of its own, retried on the consumer's delays as any
	// other; a worker crash redelivers the events of the batch not yet
	// recorded. Events with an aggregate go through their lane: the worker
	// that handled a lane's head runs up to this many of the lane's next
	// events in place (a lane chain, see lane_chain.go), each recorded
	// before the next starts, within DispatchBatchSplitAfter of handler
	// time. 1 turns both off: one job run per event.
	//
	// Defaults to DispatchBatchDefault (100); at most DispatchBatchMax.
	DispatchBatch int

	// DispatchBatchSplitAfter bounds how long a batch keeps its events in
	// one worker slot: once its handlers have run this long, the events not
	// yet handled become dispatch jobs of their own, which any free worker
	// takes. So slow handlers run in parallel as with one job per event, and
	// fast ones keep the saving. Negative: never split.
	//
	// Defaults to 50 ms.
	DispatchBatchSplitAfter time.Duration

	// InactiveAfter is how long the consumer keeps receiving new events
	// while no live worker runs it. Every worker that runs the consumer
	// records that it does (at start and every ConsumerHeartbeatInterval);
	// once none has for this long, forwarders stop creating dispatch jobs
	// for it, so a consumer that was renamed or removed from the code stops
	// piling up work. Until then its events wait for it, so workers that are
	// down for a deploy or an outage lose nothing. A worker that runs the
	// consumer again makes it receive new events again (the events
	// forwarded in between are not delivered to it; the worker logs that).
	// Negative: the consumer receives events for ever (until `tributary
	// consumers remove`).
	//
	// Defaults to InactiveAfterDefault (72 hours); at least
	// InactiveAfterMin.
	InactiveAfter time.Duration

	// MaxHandlers caps how many of the consumer's dispatch jobs run at
	// once, across every worker process: each job runs one handler at a
	// time (a batch's events one after another), so at most this many of
	// its handlers run at once. The cap is a limit named
	// "consumer:" and the consumer's name (Limit), which
	// `tributary limits set` overrides at run time; a dispatch job over it
	// waits in River's pending state, holding no worker slot. An
	// aggregate's events keep their order. Events of a capped consumer
	// that wait behind their aggregate's head are pending dispatch jobs,
	// not lane events, and run as jobs of their own (no lane chains).
	//
	// Defaults to 0: no cap.
	MaxHandlers int
}

// Batched dispatch limits and defaults (ConsumerConfig.DispatchBatch and
// DispatchBatchSplitAfter).
const (
	DispatchBatchDefault           = 100
	DispatchBatchMax               = 1000
	DispatchBatchSplitAfterDefault = 50 * time.Millisecond
)

// Consumer liveness (ConsumerConfig.InactiveAfter). The default outlasts a
// long weekend without workers: durability first, since events forwarded
// while a consumer is inactive are not delivered to it. The minimum keeps a
// live consumer whose worker missed a few heartbeats from going inactive.
const (
	InactiveAfterDefault = 72 * time.Hour
	InactiveAfterMin     = 5 * time.Minute
)

// Processed is the outcome of one dispatch attempt, for OnProcessedFunc.
type Processed struct {
	Consumer    string
	EventID     string
	EventType   string
	AggregateID string
	Attempt     int
	Duration    time.Duration
	// Err is nil when every handler succeeded.
	Err error
	// Terminal is true when the dispatch will not be retried (validation
	// failure, or the last attempt failed).
	Terminal bool
}

// Message is what a handler receives: the event with its payload decoded.
type Message[T any] struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	Version       int             `json:"version"`
	EventKind     EventKind       `json:"kind"`
	AggregateID   string          `json:"aggregate_id,omitempty"`
	Payload       T               `json:"payload"`
	Metadata      outbox.Metadata `json:"metadata"`
	SourceService string          `json:"source_service,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	// Consumer is the consumer the handler runs for.
	Consumer string `json:"consumer"`
	// Attempt is 1 on the first delivery to this consumer.
	Attempt int `json:"attempt"`
}

// HandlerFunc handles one event. A returned error retries the dispatch on
// the consumer's delays; river.JobCancel(err) gives up at once.
type HandlerFunc[T any] func(ctx context.Context, msg Message[T]) error

// Subscription pairs an event type (or pattern) with a handler. Build one
// with Handle or HandleRaw; modules can return lists of them for the
// composition root to pass to Consumer.Subscribe.
type Subscription struct {
	pattern string
	def     Definition // nil for raw handlers
	call    func(ctx context.Context, ev *outbox.Event, payload any, consumer string, attempt int) error
	err     error
}

// Handle subscribes fn to one typed event: its payload is decoded strictly
// into T and validated before fn runs.
func Handle[T any](def Event[T], fn HandlerFunc[T]) Subscription {
	return Subscription{
		pattern: def.Name(),
		def:     def,
		call: func(ctx context.Context, ev *outbox.Event, payload any, consumer string, attempt int) error {
			return fn(ctx, message(ev, payload.(T), consumer, attempt))
		},
	}
}

// HandleRaw subscribes fn to every event type matching pattern ("a.b",
// "a.*" or "*") with the payload as raw JSON. It is for generic consumers
// (logging, bridging); typed handlers should use Handle.
func HandleRaw(pattern string, fn HandlerFunc[json.RawMessage]) Subscription {
	return Subscription{
		pattern: pattern,
		call: func(ctx context.Context, ev *outbox.Event, _ any, consumer string, attempt int) error {
			return fn(ctx, message(ev, ev.Payload, consumer, attempt))
		},
		err: validatePattern(pattern),
	}
}

func message[T any](ev *outbox.Event, payload T, consumer string, attempt int) Message[T] {
	return Message[T]{
		ID: ev.ID, Type: ev.EventType, Version: ev.EventVersion, EventKind: EventKind(ev.EventKind), AggregateID: ev.AggregateID,
		Payload: payload, Metadata: ev.Metadata, SourceService: ev.SourceService, CreatedAt: ev.CreatedAt,
		Consumer: consumer, Attempt: attempt,
	}
}

// Consumer is a named set of handlers. Give it to a Dispatcher (or
// Install) to run it.
type Consumer struct {
	cfg ConsumerConfig

	mu     sync.RWMutex
	subs   []Subscription
	frozen bool
}

// NewConsumer returns a consumer for cfg.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if err := ValidateEventName(cfg.Name); err != nil {
		return nil, fmt.Errorf("invalid consumer name %q: use letters, digits and . _ : -", cfg.Name)
	}
	if cfg.Queue == "" {
		cfg.Queue = QueueDefault
	}
	if !riverjob.ValidQueueName(cfg.Queue) {
		return nil, fmt.Errorf("consumer %s: invalid queue %q: want at most 64 lower-case letters and digits, separated by single _ or -", cfg.Name, cfg.Queue)
	}
	if len(cfg.RetryDelays) == 0 {
		cfg.RetryDelays = RetryDelaysDefault()
	}
	for _, d := range cfg.RetryDelays {
		if d < 0 {
			return nil, fmt.Errorf("consumer %s: negative retry delay %s", cfg.Name, d)
		}
	}
	switch cfg.Ordering {
	case "":
		cfg.Ordering = OrderingBlock
	case OrderingBlock, OrderingSkip:
	default:
		return nil, fmt.Errorf("consumer %s: invalid ordering %q: want block or skip", cfg.Name, cfg.Ordering)
	}
	for _, k := range cfg.SkipOwnEventKinds {
		if k != EventKindDomain && k != EventKindIntegration {
			return nil, fmt.Errorf("consumer %s: invalid event kind %q in SkipOwnEventKinds", cfg.Name, k)
		}
	}
	if cfg.DispatchBatch < 0 || cfg.DispatchBatch > DispatchBatchMax {
		return nil, fmt.Errorf("consumer %s: invalid DispatchBatch %d: want 1 to %d (0 for the default, %d)", cfg.Name, cfg.DispatchBatch, DispatchBatchMax, DispatchBatchDefault)
	}
	if cfg.DispatchBatch == 0 {
		cfg.DispatchBatch = DispatchBatchDefault
	}
	if cfg.DispatchBatchSplitAfter == 0 {
		cfg.DispatchBatchSplitAfter = DispatchBatchSplitAfterDefault
	}
	switch {
	case cfg.InactiveAfter == 0:
		cfg.InactiveAfter = InactiveAfterDefault
	case cfg.InactiveAfter > 0 && cfg.InactiveAfter < InactiveAfterMin:
		return nil, fmt.Errorf("consumer %s: InactiveAfter %s is too short: want at least %s (or negative for never)", cfg.Name, cfg.InactiveAfter, InactiveAfterMin)
	}
	if cfg.MaxHandlers < 0 {
		return nil, fmt.Errorf("consumer %s: MaxHandlers %d must not be negative (0: no cap)", cfg.Name, cfg.MaxHandlers)
	}
	c := &Consumer{cfg: cfg}
	if l, ok := c.Limit(); ok {
		if err := limits.ValidateName(l.Name); err != nil {
			return nil, fmt.Errorf("consumer %s: MaxHandlers needs a name of at most %d characters: %w", cfg.Name, 100-len(consumerLimitPrefix), err)
		}
	}
	return c, nil
}

// consumerLimitPrefix begins the name of a consumer's limit (Limit).
const consumerLimitPrefix = "consumer:"

// Limit returns the limit of MaxHandlers: named "consumer:" and the
// consumer's name, Max MaxHandlers, describing the consumer's dispatch
// jobs (Kind DispatchKind, Queue the consumer's). ok is false without a
// cap. Declare it in the limits of every worker process (limits.Config;
// tributary.App declares the limits of Config.Consumers itself). It
// governs only this consumer's dispatch jobs, which carry its name: the
// limits' insert middleware matches no dispatch job by kind or queue.
func (c *Consumer) Limit() (l limits.Limit, ok bool) {
	if c.cfg.MaxHandlers == 0 {
		return limits.Limit{}, false
	}
	return limits.Limit{Name: consumerLimitPrefix + c.cfg.Name, Kind: DispatchKind, Queue: c.cfg.Queue, Max: c.cfg.MaxHandlers}, true
}

// limitName is the name of the consumer's limit, "" without a cap.
func (c *Consumer) limitName() string {
	l, _ := c.Limit()
	return l.Name
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Config returns the consumer's configuration with defaults filled in.
func (c *Consumer) Config() ConsumerConfig { return c.cfg }

// Subscribe adds subscriptions. Several handlers of one event type run in
// the order they were subscribed. Subscribe before the dispatcher starts.
func (c *Consumer) Subscribe(subs ...Subscription) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen {
		return fmt.Errorf("consumer %s: cannot subscribe after the dispatcher started", c.cfg.Name)
	}
	for _, s := range subs {
		if s.err != nil {
			return fmt.Errorf("consumer %s: %w", c.cfg.Name, s.err)
		}
		if s.call == nil {
			return fmt.Errorf("consumer %s: empty subscription", c.cfg.Name)
		}
	}
	c.subs = append(c.subs, subs...)
	return nil
}

// On subscribes fn to def; it is Subscribe(Handle(def, fn)) and panics
// where Subscribe would return an error (subscribing after start).
func On[T any](c *Consumer, def Event[T], fn HandlerFunc[T]) {
	if err := c.Subscribe(Handle(def, fn)); err != nil {
		panic(err)
	}
}

// RegisteredEventTypes lists the event types and patterns the consumer
// subscribes to, sorted, once each (for health checks and dashboards).
func (c *Consumer) RegisteredEventTypes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	seen := map[string]bool{}
	out := []string{}
	for _, s := range c.subs {
		if !seen[s.pattern] {
			seen[s.pattern] = true
			out = append(out, s.pattern)
		}
	}
	sort.Strings(out)
	return out
}

// Definitions returns the typed event types the consumer subscribes to
// (Handle, On), in subscription order, once each; raw and pattern
// subscriptions have none. An emitter that accepts them can emit every
// event the consumer handles.
func (c *Consumer) Definitions() []Definition {
	c.mu.RLock()
	defer c.mu.RUnlock()
	seen := map[string]bool{}
	var out []Definition
	for _, s := range c.subs {
		if s.def != nil && !seen[s.def.Name()] {
			seen[s.def.Name()] = true
			out = append(out, s.def)
		}
	}
	return out
}

// handlersFor returns the subscriptions matching eventType in
// registration order.
func (c *Consumer) handlersFor(eventType string) []Subscription {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Subscription
	for _, s := range c.subs {
		if matchPattern(s.pattern, eventType) {
			out = append(out, s)
		}
	}
	return out
}

func (c *Consumer) freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

// retryDelay returns the wait after the given failed attempt.
func (c *Consumer) retryDelay(attempt int) time.Duration {
	i := min(max(attempt-1, 0), len(c.cfg.RetryDelays)-1)
	return c.cfg.RetryDelays[i]
}

// maxAttempts is one first try plus one per retry delay.
func (c *Consumer) maxAttempts() int { return len(c.cfg.RetryDelays) + 1 }

// chains reports whether the worker that handled a lane's head runs the
// lane's next events in place: with more than one event per job.
func (c *Consumer) chains() bool { return c.cfg.DispatchBatch > 1 }

// ValidationError is a payload that does not decode into the handler's
// type or fails its Validate. It is terminal: the dispatch is cancelled,
// not retried.
type ValidationError struct {
	EventID   string
	EventType string
	Err       error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("event %s (%s) failed validation: %v", e.EventID, e.EventType, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

// PanicError is a handler panic, recovered and treated as a failed attempt.
type PanicError struct {
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// inactiveAfterMS is InactiveAfter as stored: milliseconds, -1 for never.
func (c *Consumer) inactiveAfterMS() int64 {
	if c.cfg.InactiveAfter < 0 {
		return -1
	}
	return c.cfg.InactiveAfter.Milliseconds()
}
