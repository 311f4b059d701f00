package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// Bus is the in-database event bus: an outbox.Publisher that turns each
// event into one dispatch job per subscribed consumer (the consumers
// recorded in tributary_event_consumer by every running Dispatcher, except
// those no live worker has run for their ConsumerConfig.InactiveAfter). It is
// an outbox.TxPublisher, so with the Forwarder the dispatch jobs commit together
// with the SENT mark: forwarding to the bus is exactly-once.
type Bus struct {
	client *queue.Client
	logger *slog.Logger

	lanes        *lanes
	consumersSQL string
}

var (
	_ outbox.TxPublisher = (*Bus)(nil)
	_ txStarter          = (*Bus)(nil)
)

// newBus returns a bus that inserts dispatch jobs through client (a
// Runtime's client in a worker process), logging to the client's logger.
func newBus(client *queue.Client) (*Bus, error) {
	if client == nil {
		return nil, errors.New("events: the bus needs a client")
	}
	// The dispatch jobs are written by the bus itself (dispatchJobs), not
	// by River's insert, which would also NOTIFY inside the forwarder's
	// transaction (a NOTIFY in a writing transaction holds Postgres' global
	// notify lock through the commit's WAL flush): PublishOutboxTx's
	// after-commit func wakes River's producers once the jobs are visible.
	logger := client.Logger()
	return &Bus{
		client:       client,
		logger:       logger,
		lanes:        newLanes(client.Schema()),
		consumersSQL: queue.Qualify(client.Schema(), busConsumersSQL),
	}, nil
}

// wakeNotices are the notifications that wake River's producers for the
// queues the dispatch jobs went to, to send once they committed.
func (b *Bus) wakeNotices(queues []string) []notice {
	channel, payloads, err := riverjob.WakeNotices(b.client.Schema(), queues)
	if err != nil {
		// The jobs are there; River's poll finds them without the nudge.
		b.logger.Warn("error waking River after dispatching events", "error", err)
		return nil
	}
	notices := make([]notice, len(payloads))
	for i, p := range payloads {
		notices[i] = notice{channel, p}
	}
	return notices
}

// sendWake sends notices (wakeNotices) once the dispatch jobs committed.
func (b *Bus) sendWake(ctx context.Context, notices []notice) {
	if err := sendNotices(context.WithoutCancel(ctx), b.client.Pool(), notices); err != nil {
		b.logger.WarnContext(ctx, "error waking River after dispatching events", "error", err)
	}
}

// Name implements outbox.Publisher.
func (b *Bus) Name() string { return "bus" }

// PublishOutbox fans events out in a transaction of its own.
func (b *Bus) PublishOutbox(ctx context.Context, events []outbox.Event) error {
	var afterCommit func(context.Context)
	err := pgx.BeginFunc(ctx, b.client.Pool(), func(tx pgx.Tx) error {
		var err error
		afterCommit, err = b.PublishOutboxTx(ctx, tx, events)
		return err
	})
	if err == nil && afterCommit != nil {
		afterCommit(ctx)
	}
	return err
}

type busConsumer struct {
	name          string
	patterns      []string
	queue         string
	maxAttempts   int
	source        string
	skipOwnKinds  []string
	dispatchBatch int
	// limit is the limit of the consumer's MaxHandlers, "" for none.
	limit string
}

func (c *busConsumer) wants(ev *outbox.Event) bool {
	if c.source != "" && ev.SourceService == c.source {
		for _, k := range c.skipOwnKinds {
			if k == ev.EventKind {
				return false
			}
		}
	}
	for _, p := range c.patterns {
		if matchPattern(p, ev.EventType) {
			return true
		}
	}
	return false
}

// PublishOutboxTx inserts the dispatch jobs in tx. events must be in emit
// order: within a (consumer, aggregate) lane they get increasing sequence
// numbers, and only a lane's head is available at once. The returned func
// wakes River's producers of the jobs' queues once tx committed.
func (b *Bus) PublishOutboxTx(ctx context.Context, tx pgx.Tx, events []outbox.Event) (func(context.Context), error) {
	batch := &pgx.Batch{}
	var prev planSettings
	publish := b.queueStartSaving(batch, aggregatesOf(events), &prev)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("error starting the dispatch insert: %w", err)
	}
	notices, err := publish(ctx, tx, events)
	// The caller's transaction goes on with the planner settings it had
	// (the AMQP bridge's EventInserter, a user's own statements after it).
	if _, rerr := tx.Exec(ctx, planRestoreSQL, prev.mode, prev.seqScan, prev.hashJoin, prev.mergeJoin); rerr != nil && err == nil {
		err = fmt.Errorf("error restoring the transaction's planner settings: %w", rerr)
	}
	if err != nil || len(notices) == 0 {
		return nil, err
	}
	return func(ctx context.Context) { b.sendWake(ctx, notices) }, nil
}

// planSettings are the planner settings genericPlanSQL changes, as a
// transaction had them before.
type planSettings struct{ mode, seqScan, hashJoin, mergeJoin string }

// planSaveSQL is genericPlanSQL that first reads the settings it changes
// (the CTE is read before the outer select's set_config calls run), for
// Bus.PublishOutboxTx to put back with planRestoreSQL.
const planSaveSQL = `
WITH prev AS MATERIALIZED (
    SELECT current_setting('plan_cache_mode') AS m, current_setting('enable_seqscan') AS s,
           current_setting('enable_hashjoin') AS h, current_setting('enable_mergejoin') AS j
)
SELECT m, s, h, j, set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)
FROM prev`

// planRestoreSQL puts back the settings planSaveSQL read.
const planRestoreSQL = `SELECT set_config('plan_cache_mode', $1, true), set_config('enable_seqscan', $2, true),
       set_config('enable_hashjoin', $3, true), set_config('enable_mergejoin', $4, true)`

// aggregatesOf is the aggregates of events, each once.
func aggregatesOf(events []outbox.Event) []string {
	return distinctAggregates(events, func(e *outbox.Event) string { return e.AggregateID })
}

// distinctAggregates is the aggregates of items (aggregate's, "" for none),
// each once, in the order they first come.
func distinctAggregates[T any](items []T, aggregate func(*T) string) []string {
	var out []string
	seen := map[string]bool{}
	for i := range items {
		if a := aggregate(&items[i]); a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// queueStart queues on batch what a publish of events of aggregates reads
// first, and returns the publish (txStarter: the forwarder sends them with
// its SENT mark): generic plans for the rest of the transaction
// (genericPlanSQL), the consumers' read and, with aggregates,
// insertReserveLate's savepoint and every consumer's lanes of the
// aggregates read without a lock. Before, the consumers' read and the rest
// were two round trips of their own, on the path of every ordered event.
// The publish returns the notifications that wake River once the
// transaction committed, which the forwarder sends with its own.
//
// Everything the bus sends in the transaction runs with the generic plan a
// connection makes once, without sequential scans, hash joins or merge
// joins, as the lanes' completion does: inserts from arrays, an upsert, the
// promotion's index probes and the reads' primary-key probes (laneLastSQL),
// which reach their rows the same way whatever the tables' sizes. Planned
// for their parameters on every call, the inserts, the reservation and the
// promotion cost 0.34 ms of planning a forward round against 0.43 ms of
// execution at a few events a round, and the reads 0.29 ms against
// 0.29 ms (docs/decisions/0001-generic-plans.md). A roll back to the
// savepoint keeps the setting. The settings hold for the rest of the
// transaction: the forwarder puts the rest's back before a transactional
// publisher of the user's (Forwarder.publishTx), and PublishOutboxTx puts
// back what its caller's transaction had.
func (b *Bus) queueStart(batch *pgx.Batch, aggregates []string) startedPublish {
	return b.queueStartSaving(batch, aggregates, nil)
}

// queueStartSaving is queueStart that, with prev, also reads into it the
// planner settings the start changes (planSaveSQL).
func (b *Bus) queueStartSaving(batch *pgx.Batch, aggregates []string, prev *planSettings) startedPublish {
	var consumers []*busConsumer
	peeked := make(map[laneKey]laneRange, len(aggregates))
	if prev == nil {
		batch.Queue(genericPlanSQL)
	} else {
		batch.Queue(planSaveSQL).QueryRow(func(row pgx.Row) error {
			var set [4]string
			if err := row.Scan(&prev.mode, &prev.seqScan, &prev.hashJoin, &prev.mergeJoin, &set[0], &set[1], &set[2], &set[3]); err != nil {
				return fmt.Errorf("error reading the transaction's planner settings: %w", err)
			}
			return nil
		})
	}
	batch.Queue(b.consumersSQL, time.Now().UTC()).Query(func(rows pgx.Rows) error {
		var err error
		if consumers, err = pgx.CollectRows(rows, scanBusConsumer); err != nil {
			return fmt.Errorf("error reading event consumers: %w", err)
		}
		return nil
	})
	if len(aggregates) > 0 {
		batch.Queue(`SAVEPOINT ` + busSavepoint)
		b.lanes.queuePeek(batch, aggregates, peeked)
	}
	return func(ctx context.Context, tx pgx.Tx, events []outbox.Event) ([]notice, error) {
		r := route(events, consumers)
		params := r.batchParams()
		if len(r.deliveries) == 0 && len(params) == 0 {
			return nil, nil
		}
		queues, err := b.insertDispatches(ctx, tx, r, params, peeked)
		if err != nil {
			return nil, err
		}
		b.logger.DebugContext(ctx, "events dispatched", "events", len(events), "dispatches", len(r.deliveries)+len(params))
		return b.wakeNotices(queues), nil
	}
}

// insertDispatches inserts params (the batched jobs) and a job or a lane
// event per delivery of r, and returns the queues of the jobs (with
// repeats) to wake: with lanes, reserving late (from the lanes peeked by
// queueStart), or first when a lane moved meanwhile.
func (b *Bus) insertDispatches(ctx context.Context, tx pgx.Tx, r routing, params []river.InsertManyParams, peeked map[laneKey]laneRange) ([]string, error) {
	if len(r.laneCounts) > 0 {
		queues, ok, err := b.insertReserveLate(ctx, tx, r, params, peeked)
		if err != nil || ok {
			return queues, err
		}
	}
	return b.insertReserveFirst(ctx, tx, r, params)
}

// insertReserveFirst reserves the lanes' sequence numbers, then inserts the
// dispatch jobs, holding the lanes' row locks through the insert (and the
// commit). It returns the queues of params and of r's deliveries' jobs
// (lane or not). An idle lane's head goes in as its available job, lane
// events or not (laneParams).
func (b *Bus) insertReserveFirst(ctx context.Context, tx pgx.Tx, r routing, params []river.InsertManyParams) ([]string, error) {
	var reserved map[laneKey]laneRange
	if len(r.laneCounts) > 0 {
		var err error
		if reserved, err = b.lanes.reserve(ctx, tx, r.laneCounts); err != nil {
			return nil, err
		}
	}
	more, evs, err := r.laneParams(reserved)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(params, more)
	if err := b.insert(ctx, tx, all, evs); err != nil {
		return nil, err
	}
	return queuesOf(all), nil
}

// insertReserveLate inserts the dispatch jobs first and reserves the lanes'
// sequence numbers last, so that the lanes' row locks (which a chain's or a
// group commit's advance waits for) are held only from the reservation to
// the commit. The sequence numbers and the lanes' heads come from the lanes
// read without a lock (peeked, by queueStart, which also set the
// savepoint): the aggregate's advisory lock keeps forwarders apart, so the
// reservation normally finds last_seq unchanged.
// A lane that was idle (its head at the next number) stays so until a
// reservation moves last_seq, so its first delivery goes in as the head's
// available job, as under the lock. A busy lane's events go in as lane
// events; under the lock, those whose lane's head moved to their sequence
// number meanwhile (the lane's chain caught up) are promoted.
// When a lane's last_seq moved between the read and the reservation
// (another publisher, the idle lanes' clean-up), or an idle lane's head
// did, everything is rolled back to the savepoint: the caller reserves first
// instead. params are the jobs without a lane; it returns the queues of
// every job inserted or promoted, and ok false after the roll back.
func (b *Bus) insertReserveLate(ctx context.Context, tx pgx.Tx, r routing, params []river.InsertManyParams, peeked map[laneKey]laneRange) (queues []string, ok bool, err error) {
	seen := make(map[laneKey]laneRange, len(r.laneCounts))
	guess := make(map[laneKey]laneRange, len(r.laneCounts))
	for k := range r.laneCounts {
		lr := peekedRange(peeked, k)
		seen[k] = lr
		if lr.head != lr.next {
			lr.head = 0 // busy: every lane job pending
		}
		guess[k] = lr
	}
	more, evs, err := r.laneParams(guess)
	if err != nil {
		return nil, false, err
	}
	all := slices.Concat(params, more)
	reserved, err := b.insertAndReserve(ctx, tx, all, evs, r.laneCounts)
	if err != nil {
		return nil, false, err
	}
	var heads []riverjob.LaneSeq
	for k, lr := range reserved {
		was := seen[k]
		idle := was.head == was.next
		if lr.next != was.next || (idle && lr.head != lr.next) {
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT `+busSavepoint); err != nil {
				return nil, false, fmt.Errorf("error rolling back the dispatch insert: %w", err)
			}
			return nil, false, nil
		}
		if !idle && lr.head == lr.next {
			heads = append(heads, riverjob.LaneSeq{Consumer: k.consumer, AggregateID: k.aggregate, Seq: lr.next})
		}
	}
	// The savepoint stays: the transaction's commit commits it, and a
	// release would cost a round trip.
	promoted, err := riverjob.PromoteNext(ctx, tx, b.client.Schema(), heads, time.Now().UTC())
	if err != nil {
		return nil, false, err
	}
	return append(queuesOf(all), promoted...), true, nil
}

// busSavepoint is insertReserveLate's savepoint, rolled back to when a lane
// moved before its reservation.
const busSavepoint = "tributary_bus_insert"

// queuesOf is the queues of params' available jobs, with repeats: a
// pending one (a capped consumer's) waits for its admitter, whom its
// insert's trigger wakes.
func queuesOf(params []river.InsertManyParams) []string {
	queues := make([]string, 0, len(params))
	for _, p := range params {
		if !p.InsertOpts.Pending {
			queues = append(queues, p.InsertOpts.Queue)
		}
	}
	return queues
}

// busCopyFrom is the number of dispatch jobs from which the bus inserts by
// COPY (riverjob.CopyNewJobs, two round trips, the cheapest per row) rather
// than one INSERT statement (riverjob.InsertNewJobs, one round trip): a
// quiet forwarder's batches hold a few events, where the round trip is the
// cost.
const busCopyFrom = 64

// insert inserts the dispatch jobs params and the lane events evs.
func (b *Bus) insert(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams, evs []laneEvent) error {
	if len(params) > 0 {
		jobs, err := dispatchJobs(params)
		if err != nil {
			return err
		}
		insert := riverjob.InsertNewJobs
		if len(jobs) >= busCopyFrom {
			insert = riverjob.CopyNewJobs
		}
		if _, err := insert(ctx, tx, b.client.Schema(), jobs, time.Now()); err != nil {
			return fmt.Errorf("error inserting %d dispatch jobs: %w", len(jobs), err)
		}
	}
	return b.lanes.insertEvents(ctx, tx, evs)
}

// insertAndReserve inserts params' dispatch jobs and evs (as insert does)
// and then reserves counts' lane sequence numbers (lanes.reserve), in tx.
// When each insert is one statement (fewer rows than COPY is used for, as
// in every round of a quiet moment), the inserts and the reservation go
// out in one round trip, the reservation last, so the lanes' row locks are
// still taken after the inserts (insertReserveLate); a failed insert skips
// the reservation: a round trip of its own after the inserts' would be on
// an ordered event's way from its commit to its handler.
func (b *Bus) insertAndReserve(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams, evs []laneEvent, counts map[laneKey]int64) (map[laneKey]laneRange, error) {
	if len(params) >= busCopyFrom || len(evs) >= laneEventCopyFrom {
		if err := b.insert(ctx, tx, params, evs); err != nil {
			return nil, err
		}
		return b.lanes.reserve(ctx, tx, counts)
	}
	batch := &pgx.Batch{}
	if len(params) > 0 {
		jobs, err := dispatchJobs(params)
		if err != nil {
			return nil, err
		}
		riverjob.QueueInsertNewJobs(batch, b.client.Schema(), jobs, time.Now())
	}
	if len(evs) > 0 {
		b.lanes.queueInsertEvents(batch, evs)
	}
	reserved := b.lanes.queueReserve(batch, counts)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("error inserting %d dispatch jobs and %d lane events and reserving their lanes: %w", len(params), len(evs), err)
	}
	return reserved, nil
}

// dispatchJobs is params (dispatch jobs, batched or not) as the rows
// River's insert would write for them: their args encoded by hand once.
// Inserted through River, every job's args went through encoding/json
// again (reflection into the args' MarshalJSON, then a compaction of what
// it wrote), most of the process's cost of a batched event.
func dispatchJobs(params []river.InsertManyParams) ([]riverjob.NewJob, error) {
	jobs := make([]riverjob.NewJob, len(params))
	checked := ""
	for i := range params {
		p := &params[i]
		var (
			args []byte
			err  error
		)
		switch a := p.Args.(type) {
		case dispatchArgs:
			args, err = appendDispatchArgs(nil, &a)
		case dispatchBatchArgs:
			args, err = appendDispatchBatchArgs(nil, &a)
		default:
			err = fmt.Errorf("events: unexpected dispatch args %T", p.Args)
		}
		if err != nil {
			return nil, fmt.Errorf("error encoding a dispatch job's args: %w", err)
		}
		opts := p.InsertOpts
		if opts.Queue != checked {
			if !riverjob.ValidQueueName(opts.Queue) {
				return nil, fmt.Errorf("events: invalid queue name %q", opts.Queue)
			}
			checked = opts.Queue
		}
		jobs[i] = riverjob.NewJob{
			Kind: p.Args.Kind(), Args: args, Queue: opts.Queue,
			Priority: river.PriorityDefault, MaxAttempts: riverjob.MaxAttempts(cmp.Or(opts.MaxAttempts, river.MaxAttemptsDefault)),
			Pending: opts.Pending, Metadata: opts.Metadata,
		}
	}
	return jobs, nil
}

func scanBusConsumer(r pgx.CollectableRow) (*busConsumer, error) {
	var c busConsumer
	err := r.Scan(&c.name, &c.patterns, &c.queue, &c.maxAttempts, &c.source, &c.skipOwnKinds, &c.dispatchBatch, &c.limit)
	return &c, err
}

// delivery is one event for one consumer that travels in a job of its own.
type delivery struct {
	c    *busConsumer
	ev   *outbox.Event
	lane laneKey // zero for an event without an aggregate
}

// routing is where a publish's events go: the deliveries in emit order,
// how many of them each lane gets, and per consumer the events without an
// aggregate it takes in batches.
type routing struct {
	consumers  []*busConsumer
	deliveries []delivery
	laneCounts map[laneKey]int64
	batched    map[*busConsumer][]outbox.Event
}

// route matches every event against every consumer.
func route(events []outbox.Event, consumers []*busConsumer) routing {
	r := routing{consumers: consumers, laneCounts: map[laneKey]int64{}, batched: map[*busConsumer][]outbox.Event{}}
	for i := range events {
		ev := &events[i]
		for _, c := range consumers {
			if !c.wants(ev) {
				continue
			}
			if ev.AggregateID == "" && c.dispatchBatch > 1 {
				r.batched[c] = append(r.batched[c], *ev)
				continue
			}
			d := delivery{c: c, ev: ev}
			if ev.AggregateID != "" {
				d.lane = laneKey{c.name, ev.AggregateID}
				r.laneCounts[d.lane]++
			}
			r.deliveries = append(r.deliveries, d)
		}
	}
	return r
}

// batchParams are the batched dispatch jobs: each consumer's events without
// an aggregate in emit order, cut by batchLen (a single event goes as a
// plain dispatch job).
func (r routing) batchParams() []river.InsertManyParams {
	var params []river.InsertManyParams
	for _, c := range r.consumers {
		evs := r.batched[c]
		for len(evs) > 0 {
			n := batchLen(evs, c.dispatchBatch)
			var args river.JobArgs = dispatchBatchArgs{Consumer: c.name, Events: evs[:n]}
			if n == 1 {
				args = dispatchArgs{Consumer: c.name, Event: evs[0]}
			}
			opts := &river.InsertOpts{Queue: c.queue, MaxAttempts: c.maxAttempts}
			if c.limit != "" {
				opts.Pending, opts.Metadata = true, limitMetadata(riverjob.LimitMetaName, c.limit, false)
			}
			params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
			evs = evs[n:]
		}
	}
	return params
}

// laneParams are the deliveries' jobs and lane events: an aggregate's get
// their lane's reserved sequence numbers in emit order; a lane's head
// (reserved[k].head at its number) goes in as its available job, marked as
// the lane's turn, and the events behind it wait as lane events
// (lane_events.go). A capped consumer's jobs wait for admission instead,
// and the events behind its lanes' heads as pending jobs
// (consumer_limit.go).
func (r routing) laneParams(reserved map[laneKey]laneRange) ([]river.InsertManyParams, []laneEvent, error) {
	params := make([]river.InsertManyParams, 0, len(r.deliveries))
	var evs []laneEvent
	for _, d := range r.deliveries {
		args := dispatchArgs{Consumer: d.c.name, Event: *d.ev}
		opts := &river.InsertOpts{Queue: d.c.queue, MaxAttempts: d.c.maxAttempts}
		if d.ev.AggregateID != "" {
			lr, ok := reserved[d.lane]
			if !ok {
				return nil, nil, fmt.Errorf("lane %s/%s was not reserved", d.lane.consumer, d.lane.aggregate)
			}
			args.AggregateID, args.Seq = d.ev.AggregateID, lr.next
			opts.Pending = lr.next > lr.head
			switch {
			case d.c.limit != "" && opts.Pending:
				opts.Metadata = limitMetadata(riverjob.LimitMetaOnRelease, d.c.limit, false)
			case d.c.limit != "":
				opts.Pending, opts.Metadata = true, limitMetadata(riverjob.LimitMetaName, d.c.limit, true)
			case !opts.Pending:
				opts.Metadata = laneTurnMetadata
			}
			lr.next++
			reserved[d.lane] = lr
			if opts.Pending && d.c.limit == "" {
				ev, err := newLaneEvent(args, d.c.queue, d.c.maxAttempts)
				if err != nil {
					return nil, nil, err
				}
				evs = append(evs, ev)
				continue
			}
		} else if d.c.limit != "" {
			opts.Pending, opts.Metadata = true, limitMetadata(riverjob.LimitMetaName, d.c.limit, false)
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
	}
	return params, evs, nil
}

// dispatchBatchMaxBytes bounds the payload bytes of one batched dispatch
// job: its events travel in the job's args, which River writes three times
// and indexes. An event at least this large goes in a job of its own.
const dispatchBatchMaxBytes = 1 << 20

// batchLen is how many of evs (at least one) the next batched job takes:
// at most max events and dispatchBatchMaxBytes of payload and metadata.
func batchLen(evs []outbox.Event, max int) int {
	size := 0
	for i := range evs {
		size += eventSize(&evs[i])
		if i > 0 && (i == max || size > dispatchBatchMaxBytes) {
			return i
		}
	}
	return min(len(evs), max)
}

// eventSize approximates an event's size in a job's args: payload,
// metadata and 256 bytes for ids, type and field names.
func eventSize(ev *outbox.Event) int {
	m := &ev.Metadata
	n := len(ev.Payload) + len(m.CorrelationID) + len(m.CausationID) + len(m.Actor) + len(m.TraceParent) + len(m.TraceState) + 256
	for k, v := range m.Extra {
		n += len(k) + len(v)
	}
	return n
}

// busConsumersSQL reads the consumers that receive new events: those a
// live worker ran within their inactive_after ($1 is now).
const busConsumersSQL = `
SELECT name, patterns, queue, max_attempts, source_service, skip_own_kinds, dispatch_batch, coalesce(limit_name, '')
FROM /*schema*/tributary_event_consumer
WHERE inactive_after_ms < 0 OR seen_at >= $1::timestamptz - inactive_after_ms * interval '1 millisecond'
ORDER BY name`
