package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// DispatchKind is the River job kind of a dispatch: one event for one
// consumer.
const DispatchKind = riverjob.DispatchKind

// dispatchArgs are a dispatch job's arguments. The event travels whole, so
// a dispatch can be retried or replayed after its outbox row was cleaned up.
type dispatchArgs struct {
	Consumer string `json:"consumer"`
	// AggregateID and Seq place the dispatch in its (consumer, aggregate)
	// lane; empty and 0 for events without an aggregate.
	AggregateID string       `json:"aggregate_id,omitempty"`
	Seq         int64        `json:"seq,omitempty"`
	Event       outbox.Event `json:"event"`
}

// Kind implements river.JobArgs.
func (dispatchArgs) Kind() string { return DispatchKind }

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

	// LaneRepairInterval is how often the dispatcher's repair sweep looks
	// at lanes whose head has not moved for 10 s with work behind it, and
	// moves on those whose head was given up outside tributary or lost (see
	// repairLanes). -1 turns it off.
	//
	// Defaults to 10 seconds (LaneRepairIntervalDefault).
	LaneRepairInterval time.Duration
}

// DispatcherStats are a dispatcher's counters since it was created.
type DispatcherStats struct {
	Handled            int64 `json:"handled"`
	Failed             int64 `json:"failed"`
	Panics             int64 `json:"panics"`
	ValidationFailures int64 `json:"validation_failures"`
	GivenUp            int64 `json:"given_up"`
	// Chained counts the events handled in place by a lane chain (the
	// worker that ran the lane's previous event ran them, without a River
	// fetch each); they are counted in Handled too.
	Chained int64 `json:"chained"`
}

// Dispatcher runs its consumers' handlers for their dispatch jobs (its River
// workers), and is the service that records the consumers in the database
// so every forwarder fans events out to them. Register it with Register.
type Dispatcher struct {
	pool      *pgxpool.Pool
	cfg       DispatcherConfig
	logger    *slog.Logger
	consumers map[string]*Consumer
	lanes     *lanes
	completer *laneCompleter

	handled, failed, panics, validation, givenUp, chained atomic.Int64

	// processID is this process's River client id (what attempted_by
	// records); running holds the lane dispatch jobs this process is
	// running (in Work or in a lane chain), for the repair sweep.
	processID string
	running   sync.Map
	// chainLanes holds the lanes (laneKey) a chain of this process runs,
	// for the repair sweep's look at a claimed lane event (claimLost);
	// livenessTimeout is the runtime's, by which the sweep judges another
	// process's claims.
	chainLanes      sync.Map
	livenessTimeout time.Duration

	life queue.Lifecycle
}

// NewDispatcher returns a dispatcher for cfg's consumers.
func NewDispatcher(pool *pgxpool.Pool, cfg DispatcherConfig) (*Dispatcher, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	d := &Dispatcher{
		pool:      pool,
		cfg:       cfg,
		logger:    cfg.Logger.With("component", "dispatcher"),
		consumers: map[string]*Consumer{},
		lanes:     newLanes(cfg.Schema),

		livenessTimeout: queue.LivenessTimeoutDefault,
	}
	d.completer = &laneCompleter{d: d}
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
	d.processID = rt.ProcessID()
	d.livenessTimeout = cmp.Or(rt.LivenessTimeout(), queue.LivenessTimeoutDefault)
	queue.AddWorker[dispatchArgs](rt, &dispatchWorker[dispatchArgs]{d: d, work: d.work})
	queue.AddWorker[dispatchBatchArgs](rt, &dispatchWorker[dispatchBatchArgs]{d: d, work: d.workBatch})
	return rt.AddService(d)
}

// AddConsumer adds c to the dispatcher's consumers, as if it had been in
// DispatcherConfig.Consumers: a process assembles its consumers before it
// starts (tributary.On adds them one handler at a time). It returns an error
// for a nil consumer, a name the dispatcher has already, and once the
// dispatcher started (the consumers are recorded at Start). Call it before
// Start, not concurrently with it.
func (d *Dispatcher) AddConsumer(c *Consumer) error {
	switch {
	case c == nil:
		return errors.New("nil consumer")
	case d.life.Running():
		return fmt.Errorf("consumer %s: cannot add a consumer after the dispatcher started", c.Name())
	case d.consumers[c.Name()] != nil:
		return fmt.Errorf("consumer %q is given twice", c.Name())
	}
	d.consumers[c.Name()] = c
	return nil
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() DispatcherStats {
	return DispatcherStats{Handled: d.handled.Load(), Failed: d.failed.Load(), Panics: d.panics.Load(),
		ValidationFailures: d.validation.Load(), GivenUp: d.givenUp.Load(), Chained: d.chained.Load()}
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
// from then on every forwarder fans events out to them. While it runs, the
// dispatcher keeps recording that its consumers are live (every
// ConsumerHeartbeatInterval) and sweeps stuck lanes.
func (d *Dispatcher) Start(ctx context.Context) error {
	return d.life.Start(ctx, d.Name(), func(run *queue.Run) error {
		if err := d.registerConsumers(ctx); err != nil {
			return err
		}
		if len(d.consumers) > 0 {
			run.Go(func() { d.runBackground(run.Stopping()) })
		}
		return nil
	})
}

// registerConsumers upserts every consumer's row and warns about consumers
// that were inactive.
func (d *Dispatcher) registerConsumers(ctx context.Context) error {
	now := time.Now().UTC()
	for _, c := range d.Consumers() {
		c.freeze()
		kinds := make([]string, len(c.cfg.SkipOwnEventKinds))
		for i, k := range c.cfg.SkipOwnEventKinds {
			kinds[i] = string(k)
		}
		types := c.RegisteredEventTypes()
		var seenAt *time.Time
		var inactiveMS int64
		err := d.pool.QueryRow(ctx, d.q(consumerSeenSQL), c.Name()).Scan(&seenAt, &inactiveMS)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("error reading consumer %s: %w", c.Name(), err)
		}
		if _, err := d.pool.Exec(ctx, d.q(upsertConsumerSQL), c.Name(), types, c.cfg.Queue, c.maxAttempts(), c.cfg.SourceService, kinds, now,
			c.cfg.DispatchBatch, string(c.cfg.Ordering), c.inactiveAfterMS(), nullable(c.limitName())); err != nil {
			return fmt.Errorf("error registering consumer %s: %w", c.Name(), err)
		}
		if seenAt != nil && inactiveMS >= 0 && now.Sub(*seenAt) > time.Duration(inactiveMS)*time.Millisecond {
			d.logger.WarnContext(ctx, "consumer was inactive: events forwarded while no worker ran it were not delivered to it",
				"consumer", c.Name(), "last_seen", seenAt.UTC(), "inactive_after", time.Duration(inactiveMS)*time.Millisecond)
		}
		if err := d.checkLimitDeclared(ctx, c); err != nil {
			return err
		}
		d.logger.InfoContext(ctx, "consumer registered", "consumer", c.Name(), "event_types", len(types), "queue", c.cfg.Queue)
		d.logger.DebugContext(ctx, "consumer event types", "consumer", c.Name(), "event_types", types)
	}
	return nil
}

// Stop stops the heartbeat and the lane repair; dispatch jobs stop with
// River.
func (d *Dispatcher) Stop(ctx context.Context) error {
	_, err := d.life.Stop(ctx)
	return err
}

// consumerArgs are the args of both kinds of dispatch job: they name the
// consumer they are for.
type consumerArgs interface {
	river.JobArgs
	consumer() string
}

func (a dispatchArgs) consumer() string      { return a.Consumer }
func (a dispatchBatchArgs) consumer() string { return a.Consumer }

// dispatchWorker is the River worker of one kind of dispatch job for its
// Dispatcher.
type dispatchWorker[A consumerArgs] struct {
	river.WorkerDefaults[A]
	d    *Dispatcher
	work func(ctx context.Context, job *river.Job[A]) error
}

func (w *dispatchWorker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	err := w.work(ctx, job)
	if cause, lost := riverjob.RecordLostConnection(err); lost {
		// The database connection failed while the dispatcher recorded
		// the dispatch, not the handler: the job runs again without
		// spending an attempt, so a burst of terminated sessions cannot
		// discard events (or block a lane) that never failed.
		delay := riverjob.RecordRetryDelay(job.Metadata)
		w.d.logger.WarnContext(ctx, "the database connection failed while recording a dispatch: it runs again, its attempt not counted",
			"job_id", job.ID, "consumer", job.Args.consumer(), "attempt", job.Attempt, "retry_in", delay, "error", cause)
		return river.JobSnooze(delay)
	}
	return err
}

// recordFailed marks a failure of the dispatcher's own writes around the
// handlers (the lane's turn, the completion in the lane, a batch's
// outcome), as opposed to a handler's failure.
var recordFailed = riverjob.OwnRecord

// NextRetry follows the consumer's retry delays (a batched dispatch fails as
// a whole only when its outcome cannot be recorded).
func (w *dispatchWorker[A]) NextRetry(job *river.Job[A]) time.Time {
	return w.d.nextRetry(job.Args.consumer(), job.Attempt)
}

// nextRetry is when a dispatch of consumer that failed attempt runs again.
func (d *Dispatcher) nextRetry(consumer string, attempt int) time.Time {
	if c := d.consumers[consumer]; c != nil {
		return time.Now().Add(c.retryDelay(attempt))
	}
	return time.Now().Add(5 * time.Second)
}

// work runs the consumer's handlers for the event, in registration order.
func (d *Dispatcher) work(ctx context.Context, job *river.Job[dispatchArgs]) error {
	args := job.Args
	c := d.consumers[args.Consumer]
	if c == nil {
		return d.notRunHere(ctx, args.Consumer, job.JobRow)
	}
	if args.AggregateID != "" {
		d.running.Store(job.ID, struct{}{})
		defer d.running.Delete(job.ID)
	}
	if args.AggregateID != "" && !hadLaneTurn(job.Metadata) {
		early, head, err := d.lanes.turn(ctx, d.pool, job.ID, args)
		if err != nil {
			return recordFailed(err)
		}
		if early {
			d.logger.WarnContext(ctx, "dispatch started ahead of its lane's head (made available outside tributary): back to pending, attempt not counted",
				"consumer", args.Consumer, "aggregate_id", args.AggregateID, "seq", args.Seq, "head_seq", head, "job_id", job.ID)
			// Back to pending already; River's own update finds the job no
			// longer running and leaves it there.
			return river.JobSnooze(0)
		}
	}
	start := time.Now()
	r := d.deliver(ctx, c, &args.Event, job.ID, job.Attempt, job.MaxAttempts, args.Seq)
	switch {
	case r.err == nil:
		if args.AggregateID == "" {
			return nil
		}
		if ctx.Err() != nil {
			return d.completeInLane(ctx, job)
		}
		return d.runChain(ctx, c, job, start)
	case args.AggregateID != "" && d.cancelRequested(ctx, job.ID):
		// An operator cancelled the job while it ran (River records it as
		// cancelled): the event was given up, the lane moves on now.
		d.releaseLane(ctx, args, r.logger.get(), "the dispatch was cancelled while it ran")
		return r.err
	case r.terminal:
		if err := d.onGiveUp(ctx, c, job, r); err != nil {
			r.logger.get().ErrorContext(ctx, "error recording the blocked lane", "error", err)
			if r.validation != nil || isCancel(r.err) {
				// Not cancelled without the lane knowing why, which the repair
				// sweep would take for an operator's cancel: fail the attempt
				// instead; the next one records it (the last is discarded,
				// which the sweep holds under OrderingBlock).
				return fmt.Errorf("%v (not cancelled yet: %v)", r.err, err)
			}
		}
		if r.validation != nil {
			return river.JobCancel(r.err)
		}
		return r.err
	default:
		return r.err
	}
}

// runsJob reports whether this process runs the lane dispatch job id now.
func (d *Dispatcher) runsJob(id int64) bool {
	_, ok := d.running.Load(id)
	return ok
}

// runsLane reports whether a chain of this process runs the lane now.
func (d *Dispatcher) runsLane(consumer, aggregate string) bool {
	_, ok := d.chainLanes.Load(laneKey{consumer, aggregate})
	return ok
}

// cancelRequested reports whether an operator asked River to cancel the
// running job: its context says so when the request reached this process,
// the job's metadata when the handler returned first. Only failed lane jobs
// ask, so the read costs nothing on the success path.
func (d *Dispatcher) cancelRequested(ctx context.Context, jobID int64) bool {
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return true
	}
	requested, err := riverjob.CancelRequested(context.WithoutCancel(ctx), d.pool, d.cfg.Schema, jobID)
	return err == nil && requested
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
func (d *Dispatcher) deliver(ctx context.Context, c *Consumer, ev *outbox.Event, jobID int64, attempt, maxAttempts int, seq int64) deliveryResult {
	r := deliveryResult{logger: &lazyLogger{base: d.cfg.Logger, consumer: c.Name(), ev: ev, jobID: jobID, attempt: attempt, seq: seq}}
	hctx, span := startHandleSpan(withHandlerContext(ctx, r.logger), c.Name(), ev, attempt)
	start := time.Now()
	r.err = d.runHandlers(hctx, c, ev, attempt)
	endSpan(span, r.err)
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
	return slices.Sorted(maps.Keys(d.consumers))
}

// runHandlers decodes the payload once per definition, all of them before
// any handler runs (so a payload that fails one handler's validation runs
// none of them), then runs every matching handler in registration order; a
// panic is recovered into a PanicError.
func (d *Dispatcher) runHandlers(ctx context.Context, c *Consumer, ev *outbox.Event, attempt int) error {
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

func (d *Dispatcher) call(ctx context.Context, s Subscription, ev *outbox.Event, payload any, consumer string, attempt int) (err error) {
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

func (d *Dispatcher) processed(ctx context.Context, c *Consumer, ev *outbox.Event, attempt int, dur time.Duration, err error, terminal bool) {
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
func (d *Dispatcher) completeInLane(ctx context.Context, job *river.Job[dispatchArgs]) error {
	return recordFailed(d.completer.complete(ctx, job))
}

// wakeRiver tells River's producers that dispatch jobs became available
// in the queues (see lanes.wake).
func (d *Dispatcher) wakeRiver(ctx context.Context, queueNames ...string) {
	d.lanes.wake(ctx, d.pool, d.logger, queueNames...)
}

// q qualifies a statement on the consumer table.
func (d *Dispatcher) q(sql string) string { return queue.Qualify(d.cfg.Schema, sql) }

// onGiveUp applies the consumer's ordering policy to a lane dispatch that
// will not be retried: with OrderingSkip the lane moves on to the next
// event; with OrderingBlock the lane records that this job holds it, and
// why, until an operator retries or skips it.
func (d *Dispatcher) onGiveUp(ctx context.Context, c *Consumer, job *river.Job[dispatchArgs], r deliveryResult) error {
	args := job.Args
	if args.AggregateID == "" {
		return nil
	}
	logger := r.logger.get()
	if c.cfg.Ordering == OrderingSkip {
		d.releaseLane(ctx, args, logger, "")
		return nil
	}
	reason := blockReason(r, job.Attempt)
	ok, err := d.lanes.block(context.WithoutCancel(ctx), d.pool, args.Consumer, args.AggregateID, args.Seq, job.ID, reason, job.EncodedArgs)
	if err != nil {
		return err
	}
	if ok {
		logger.WarnContext(ctx, "aggregate blocked for this consumer until the dispatch is retried or skipped (tributary lanes retry|skip)", "policy", OrderingBlock)
	}
	return nil
}

// blockReason says why a dispatch was given up, for the blocked lane.
func blockReason(r deliveryResult, attempt int) string {
	switch {
	case r.validation != nil:
		return r.validation.Error()
	case isCancel(r.err):
		return "cancelled by its handler: " + r.err.Error()
	default:
		return fmt.Sprintf("failed %d times, retries used up: %v", attempt, r.err)
	}
}

// releaseLane moves the lane past a dispatch that was given up (OrderingSkip,
// or an operator's cancel), in a transaction of its own, and wakes River for
// the next one. A failure is logged: the job stays at the lane's head,
// where a retry moves the lane on, and the repair sweep releases a head an
// operator cancelled.
func (d *Dispatcher) releaseLane(ctx context.Context, args dispatchArgs, logger *slog.Logger, why string) {
	// The job's context may be cancelled (that is often why we are here).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	promotedQueue, err := d.lanes.release(ctx, d.pool, args.Consumer, args.AggregateID, args.Seq)
	if err != nil {
		logger.ErrorContext(ctx, "error moving the lane past a given-up dispatch", "error", err)
		return
	}
	if why != "" {
		logger.InfoContext(ctx, "lane moved on: "+why)
	}
	d.wakeRiver(ctx, promotedQueue)
}

// checkLimitDeclared warns when c is capped and no process has declared
// its limit: its dispatch jobs would wait for an admission that never
// comes. The App declares it before its consumers register; a program
// that installs the events package alone declares Consumer.Limit in its
// limits.Config.
func (d *Dispatcher) checkLimitDeclared(ctx context.Context, c *Consumer) error {
	name := c.limitName()
	if name == "" {
		return nil
	}
	var declared bool
	if err := d.pool.QueryRow(ctx, d.q(limitDeclaredSQL), name).Scan(&declared); err != nil {
		return fmt.Errorf("error reading the limit of consumer %s: %w", c.Name(), err)
	}
	if !declared {
		d.logger.WarnContext(ctx, "consumer is capped by a limit no process has declared: its dispatch jobs wait until one does (declare Consumer.Limit in limits.Config)",
			"consumer", c.Name(), "limit", name)
	}
	return nil
}

const limitDeclaredSQL = `SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_limit WHERE name = $1)`

// nullable is s, or NULL when it is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// upsertConsumerSQL registers a consumer, with the limit of its
// MaxHandlers (limit_name, NULL for none), which the forwarder writes
// into its dispatch jobs. lane_events stays true for
// workers of versions that still read it (they then write a lane's waiting
// events as lane events, as this version does, rather than as pending
// dispatch jobs); this version does not read it.
const upsertConsumerSQL = `
INSERT INTO /*schema*/tributary_event_consumer (name, patterns, queue, max_attempts, source_service, skip_own_kinds, updated_at,
                                                dispatch_batch, ordering, seen_at, inactive_after_ms, lane_events, limit_name)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7, $10, true, $11)
ON CONFLICT (name) DO UPDATE SET patterns = excluded.patterns, queue = excluded.queue, max_attempts = excluded.max_attempts,
    source_service = excluded.source_service, skip_own_kinds = excluded.skip_own_kinds, updated_at = excluded.updated_at,
    dispatch_batch = excluded.dispatch_batch, ordering = excluded.ordering, seen_at = excluded.seen_at,
    inactive_after_ms = excluded.inactive_after_ms, lane_events = true, limit_name = excluded.limit_name`

const consumerSeenSQL = `
SELECT seen_at, inactive_after_ms FROM /*schema*/tributary_event_consumer WHERE name = $1`
