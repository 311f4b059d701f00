package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// DispatchKind is the River job kind of a dispatch: one event for one
// consumer.
const DispatchKind = "tributary.event.dispatch"

// DispatchArgs are a dispatch job's arguments. The event travels whole, so
// a dispatch can be retried or replayed after its outbox row was cleaned up.
type DispatchArgs struct {
	Consumer string `json:"consumer"`
	// AggregateID and Seq place the dispatch in its (consumer, aggregate)
	// lane; empty and 0 for events without an aggregate.
	AggregateID string            `json:"aggregate_id,omitempty"`
	Seq         int64             `json:"seq,omitempty"`
	Event       queue.OutboxEvent `json:"event"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return DispatchKind }

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	// Schema holds tributary's and River's tables. Defaults to "public".
	Schema string

	// Logger for the dispatcher and, enriched, for handlers.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// Consumers run by this worker process. Every process that works the
	// consumers' queues must run the same consumers.
	Consumers []*Consumer

	// LaneRepairInterval is how often the dispatcher promotes lane heads
	// left pending (a safety net; see RepairLanes). -1 turns it off.
	//
	// Defaults to 30 seconds.
	LaneRepairInterval time.Duration
}

// DispatcherStats are a dispatcher's counters since it was created.
type DispatcherStats struct {
	Handled            int64 `json:"handled"`
	Failed             int64 `json:"failed"`
	Panics             int64 `json:"panics"`
	ValidationFailures int64 `json:"validation_failures"`
	GivenUp            int64 `json:"given_up"`
}

// Dispatcher is the River worker of dispatch jobs, running each consumer's
// handlers, and the service that records the consumers in the database so
// every forwarder fans events out to them. Register it with Register.
type Dispatcher struct {
	river.WorkerDefaults[DispatchArgs]

	pool      *pgxpool.Pool
	cfg       DispatcherConfig
	logger    *slog.Logger
	consumers map[string]*Consumer

	advanceSQL, promoteSQL, upsertConsumerSQL                     string
	lockLanesSQL, advanceManySQL, promoteManySQL, completeManySQL string
	insertRemaindersSQL                                           string
	riverInsertChannel                                            string

	handled, failed, panics, validation, givenUp atomic.Int64

	completer  *laneCompleter
	repairSQL  string
	stopRepair context.CancelFunc
	repairDone chan struct{}
}

// NewDispatcher returns a dispatcher for cfg's consumers.
func NewDispatcher(pool *pgxpool.Pool, cfg DispatcherConfig) (*Dispatcher, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	d := &Dispatcher{
		pool:                pool,
		cfg:                 cfg,
		logger:              cfg.Logger.With("component", "dispatcher"),
		consumers:           map[string]*Consumer{},
		advanceSQL:          queue.Qualify(cfg.Schema, laneAdvanceSQL),
		promoteSQL:          queue.Qualify(cfg.Schema, lanePromoteSQL),
		upsertConsumerSQL:   queue.Qualify(cfg.Schema, upsertConsumerSQL),
		lockLanesSQL:        queue.Qualify(cfg.Schema, lockLanesSQL),
		advanceManySQL:      queue.Qualify(cfg.Schema, laneAdvanceManySQL),
		promoteManySQL:      queue.Qualify(cfg.Schema, lanePromoteManySQL),
		completeManySQL:     queue.Qualify(cfg.Schema, completeManySQL),
		insertRemaindersSQL: queue.Qualify(cfg.Schema, insertRemaindersSQL),
		riverInsertChannel:  cfg.Schema + ".river_insert",
	}
	d.completer = &laneCompleter{d: d}
	d.repairSQL = queue.Qualify(cfg.Schema, laneRepairSQL)
	if d.cfg.LaneRepairInterval == 0 {
		d.cfg.LaneRepairInterval = LaneRepairIntervalDefault
	}
	for _, c := range cfg.Consumers {
		if _, dup := d.consumers[c.Name()]; dup {
			return nil, fmt.Errorf("consumer %q is given twice", c.Name())
		}
		d.consumers[c.Name()] = c
	}
	return d, nil
}

// Register adds the dispatch workers to rt and the dispatcher as a
// service.
func (d *Dispatcher) Register(rt *queue.Runtime) error {
	queue.AddWorker(rt, d)
	queue.AddWorker[DispatchBatchArgs](rt, &batchWorker{d: d})
	return rt.AddService(d)
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() DispatcherStats {
	return DispatcherStats{Handled: d.handled.Load(), Failed: d.failed.Load(), Panics: d.panics.Load(),
		ValidationFailures: d.validation.Load(), GivenUp: d.givenUp.Load()}
}

// Consumers returns the dispatcher's consumers sorted by name.
func (d *Dispatcher) Consumers() []*Consumer {
	out := make([]*Consumer, 0, len(d.consumers))
	for _, c := range d.consumers {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Name implements queue.Service.
func (d *Dispatcher) Name() string { return "event dispatcher" }

// Start records the consumers and their subscriptions in the database;
// from then on every forwarder fans events out to them.
func (d *Dispatcher) Start(ctx context.Context) error {
	now := time.Now().UTC()
	for _, c := range d.Consumers() {
		c.freeze()
		kinds := make([]string, len(c.cfg.SkipOwnEventKinds))
		for i, k := range c.cfg.SkipOwnEventKinds {
			kinds[i] = string(k)
		}
		types := c.RegisteredEventTypes()
		if _, err := d.pool.Exec(ctx, d.upsertConsumerSQL, c.Name(), types, c.cfg.Queue, c.maxAttempts(), c.cfg.SourceService, kinds, now, c.cfg.DispatchBatch); err != nil {
			return fmt.Errorf("error registering consumer %s: %w", c.Name(), err)
		}
		d.logger.InfoContext(ctx, "consumer registered", "consumer", c.Name(), "event_types", len(types), "queue", c.cfg.Queue)
		d.logger.DebugContext(ctx, "consumer event types", "consumer", c.Name(), "event_types", types)
	}
	if d.cfg.LaneRepairInterval > 0 && len(d.consumers) > 0 {
		repairCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		d.stopRepair = cancel
		d.repairDone = make(chan struct{})
		go func() {
			defer close(d.repairDone)
			d.runLaneRepair(repairCtx, d.cfg.LaneRepairInterval)
		}()
	}
	return nil
}

// Stop stops the lane repair; dispatch jobs stop with River.
func (d *Dispatcher) Stop(ctx context.Context) error {
	if d.stopRepair == nil {
		return nil
	}
	d.stopRepair()
	select {
	case <-d.repairDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NextRetry follows the consumer's retry delays.
func (d *Dispatcher) NextRetry(job *river.Job[DispatchArgs]) time.Time {
	return d.nextRetry(job.Args.Consumer, job.Attempt)
}

// nextRetry is when a dispatch of consumer that failed attempt runs again.
func (d *Dispatcher) nextRetry(consumer string, attempt int) time.Time {
	if c := d.consumers[consumer]; c != nil {
		return time.Now().Add(c.retryDelay(attempt))
	}
	return time.Now().Add(5 * time.Second)
}

// Work runs the consumer's handlers for the event, in registration order.
func (d *Dispatcher) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	args := job.Args
	c := d.consumers[args.Consumer]
	if c == nil {
		return fmt.Errorf("%w: %q (registered here: %v)", errNoConsumer, args.Consumer, d.consumerNames())
	}
	r := d.deliver(ctx, c, &args.Event, job.ID, job.Attempt, job.MaxAttempts, args.Seq)
	switch {
	case r.err == nil:
		if args.AggregateID == "" {
			return nil
		}
		return d.completeInLane(ctx, job)
	case r.validation != nil:
		d.onGiveUp(ctx, c, job, r.logger.get())
		return river.JobCancel(r.err)
	case r.terminal:
		d.onGiveUp(ctx, c, job, r.logger.get())
		return r.err
	default:
		return r.err
	}
}

// deliveryResult is the outcome of one delivery of an event to a consumer.
type deliveryResult struct {
	err        error
	validation *ValidationError // set for a validation failure
	terminal   bool             // the delivery is not retried
	logger     *lazyLogger
}

// deliver runs c's handlers for ev as the given attempt, calls the
// consumer's OnProcessedFunc, counts and logs the outcome. Dispatch jobs and
// batched dispatch jobs both deliver through it.
func (d *Dispatcher) deliver(ctx context.Context, c *Consumer, ev *queue.OutboxEvent, jobID int64, attempt, maxAttempts int, seq int64) deliveryResult {
	attrs := []any{"consumer", c.Name(), "event_id", ev.ID, "event_type", ev.EventType,
		"correlation_id", ev.Metadata.CorrelationID, "job_id", jobID, "attempt", attempt}
	if ev.AggregateID != "" {
		attrs = append(attrs, "aggregate_id", ev.AggregateID, "seq", seq)
	}
	r := deliveryResult{logger: &lazyLogger{base: d.cfg.Logger, attrs: attrs}}
	hctx := withHandlerContext(ctx, ev.Metadata.CorrelationID, r.logger)
	start := time.Now()
	r.err = d.runHandlers(hctx, c, ev, attempt)
	errors.As(r.err, &r.validation)
	r.terminal = r.validation != nil || isCancel(r.err) || (r.err != nil && attempt >= maxAttempts)
	d.processed(hctx, c, ev, attempt, time.Since(start), r.err, r.terminal)

	switch {
	case r.err == nil:
		d.handled.Add(1)
	case r.validation != nil:
		d.validation.Add(1)
		d.givenUp.Add(1)
		r.logger.get().ErrorContext(ctx, "event failed validation, not retrying", "error", r.validation.Err)
	case r.terminal:
		d.failed.Add(1)
		d.givenUp.Add(1)
		r.logger.get().ErrorContext(ctx, "event handler failed for good, dispatch discarded", "error", r.err)
	default:
		d.failed.Add(1)
		r.logger.get().WarnContext(ctx, "event handler failed, will retry", "error", r.err, "retry_in", c.retryDelay(attempt))
	}
	return r
}

func isCancel(err error) bool {
	var jc *river.JobCancelError
	return errors.As(err, &jc)
}

func (d *Dispatcher) consumerNames() []string {
	names := make([]string, 0, len(d.consumers))
	for n := range d.consumers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// runHandlers decodes the payload once per definition, all of them before
// any handler runs (so a payload that fails one handler's validation runs
// none of them), then runs every matching handler in registration order; a
// panic is recovered into a PanicError.
func (d *Dispatcher) runHandlers(ctx context.Context, c *Consumer, ev *queue.OutboxEvent, attempt int) error {
	subs := c.handlersFor(ev.EventType)
	payloads := make([]any, len(subs))
	for i, s := range subs {
		if s.def == nil {
			continue
		}
		if j := slices.IndexFunc(subs[:i], func(o Subscription) bool { return o.def == s.def }); j >= 0 {
			payloads[i] = payloads[j]
			continue
		}
		p, err := s.def.decode(ev.Payload)
		if err != nil {
			return &ValidationError{EventID: ev.ID, EventType: ev.EventType, Err: err}
		}
		payloads[i] = p
	}
	for i, s := range subs {
		if err := d.call(ctx, s, ev, payloads[i], c.Name(), attempt); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dispatcher) call(ctx context.Context, s Subscription, ev *queue.OutboxEvent, payload any, consumer string, attempt int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.panics.Add(1)
			stack := string(debug.Stack())
			Logger(ctx).ErrorContext(ctx, "event handler panicked", "panic", fmt.Sprint(r), "stack", stack)
			err = &PanicError{Value: r, Stack: stack}
		}
	}()
	return s.call(ctx, ev, payload, consumer, attempt)
}

func (d *Dispatcher) processed(ctx context.Context, c *Consumer, ev *queue.OutboxEvent, attempt int, dur time.Duration, err error, terminal bool) {
	if c.cfg.OnProcessedFunc == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			Logger(ctx).ErrorContext(ctx, "OnProcessedFunc panicked", "panic", fmt.Sprint(r))
		}
	}()
	c.cfg.OnProcessedFunc(ctx, Processed{Consumer: c.Name(), EventID: ev.ID, EventType: ev.EventType, AggregateID: ev.AggregateID,
		Attempt: attempt, Duration: dur, Err: err, Terminal: terminal})
}

// completeInLane completes the job and hands its lane to the next event, in
// one transaction (shared with other completions, see laneCompleter), so
// the next event cannot start before this one is done and cannot be
// forgotten if this process dies.
func (d *Dispatcher) completeInLane(ctx context.Context, job *river.Job[DispatchArgs]) error {
	return d.completer.complete(ctx, job)
}

// wakeRiver tells River's producers that jobs became available in the
// queues, as River's own insert does. It runs after the commit, as a
// statement of its own: a NOTIFY inside a writing transaction holds
// Postgres' global notify lock through that transaction's WAL flush,
// serialising the commits of every worker; a read-only NOTIFY commits
// without a flush.
func (d *Dispatcher) wakeRiver(ctx context.Context, queueNames ...string) {
	for _, q := range queueNames {
		if q == "" {
			continue
		}
		payload := fmt.Sprintf(`{"queue": %q}`, q)
		if _, err := d.pool.Exec(context.WithoutCancel(ctx), "SELECT pg_notify($1, $2)", d.riverInsertChannel, payload); err != nil {
			// The job is available; River's poll finds it without the nudge.
			d.logger.WarnContext(ctx, "error waking River for a promoted dispatch", "error", err)
		}
	}
}

// onGiveUp applies the consumer's ordering policy to a dispatch that will
// not be retried: with OrderingSkip the lane moves on to the next event.
func (d *Dispatcher) onGiveUp(ctx context.Context, c *Consumer, job *river.Job[DispatchArgs], logger *slog.Logger) {
	if job.Args.AggregateID == "" {
		return
	}
	if c.cfg.Ordering != OrderingSkip {
		logger.WarnContext(ctx, "aggregate blocked for this consumer until the dispatch is retried", "policy", OrderingBlock)
		return
	}
	var promotedQueue string
	err := pgx.BeginFunc(context.WithoutCancel(ctx), d.pool, func(tx pgx.Tx) error {
		var err error
		promotedQueue, err = d.advanceLane(ctx, tx, job.Args)
		return err
	})
	if err != nil {
		// The job stays at the lane's head; a retry of it moves the lane on.
		logger.ErrorContext(ctx, "error skipping past a failed dispatch", "error", err)
		return
	}
	d.wakeRiver(ctx, promotedQueue)
}

// advanceLane moves the lane's head past args.Seq and makes the next
// dispatch of the lane available. Two statements: the second needs a
// snapshot taken after the lane row lock was granted, so that it sees a
// dispatch a forwarder inserted while this transaction waited for the lock.
func (d *Dispatcher) advanceLane(ctx context.Context, tx pgx.Tx, args DispatchArgs) (promotedQueue string, err error) {
	var head int64
	err = tx.QueryRow(ctx, d.advanceSQL, customPlan, args.Consumer, args.AggregateID, args.Seq, time.Now().UTC()).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not the head: a replay of a skipped dispatch, or a re-run after a
		// crash between the lane update and River's bookkeeping.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error advancing lane %s/%s: %w", args.Consumer, args.AggregateID, err)
	}
	err = tx.QueryRow(ctx, d.promoteSQL, customPlan, args.Consumer, args.AggregateID, head, time.Now().UTC()).Scan(&promotedQueue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // the lane is idle now
	}
	if err != nil {
		return "", fmt.Errorf("error promoting the next dispatch of lane %s/%s: %w", args.Consumer, args.AggregateID, err)
	}
	return promotedQueue, nil
}

const laneAdvanceSQL = `
UPDATE /*schema*/tributary_event_lane
SET head_seq = head_seq + 1, updated_at = $4
WHERE consumer = $1 AND aggregate_id = $2 AND head_seq = $3
RETURNING head_seq`

// lanePromoteSQL makes the lane's next dispatch available.
const lanePromoteSQL = `
UPDATE /*schema*/river_job
SET state = 'available', scheduled_at = $4
WHERE state = 'pending' AND kind = 'tributary.event.dispatch'
  AND (args ->> 'consumer') = $1 AND (args ->> 'aggregate_id') = $2 AND ((args ->> 'seq')::bigint) = $3
RETURNING queue`

const upsertConsumerSQL = `
INSERT INTO /*schema*/tributary_event_consumer (name, patterns, queue, max_attempts, source_service, skip_own_kinds, updated_at, dispatch_batch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET patterns = excluded.patterns, queue = excluded.queue, max_attempts = excluded.max_attempts,
    source_service = excluded.source_service, skip_own_kinds = excluded.skip_own_kinds, updated_at = excluded.updated_at,
    dispatch_batch = excluded.dispatch_batch`
