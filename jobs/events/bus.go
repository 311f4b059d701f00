package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tributary-run/tributary/queue"
)

// BusConfig configures a Bus.
type BusConfig struct {
	// Logger for the bus. Defaults to the client's logger.
	Logger *slog.Logger
}

// Bus is the in-database event bus: an OutboxPublisher that turns each
// event into one dispatch job per subscribed consumer (the consumers
// recorded in tributary_event_consumer by every running Dispatcher, except
// those no live worker has run for their ConsumerConfig.InactiveAfter). It is
// a TxPublisher, so with the Forwarder the dispatch jobs commit together
// with the SENT mark: forwarding to the bus is exactly-once.
type Bus struct {
	client   *queue.Client
	inserter *river.Client[pgx.Tx]
	logger   *slog.Logger

	consumersSQL, laneSQL string
	riverInsertChannel    string

	mu     sync.Mutex
	queues []string // the queues of the consumers last read
}

// NewBus returns a bus that inserts dispatch jobs through client (a
// Runtime's client in a worker process).
func NewBus(client *queue.Client, cfg BusConfig) (*Bus, error) {
	if client == nil {
		return nil, errors.New("events: NewBus needs a client")
	}
	logger := cmp.Or(cfg.Logger, client.Logger())
	// An insert-only River client of its own, whose insert notifications
	// are rate-limited to nothing: River would NOTIFY inside the forwarder's
	// transaction, and a NOTIFY in a writing transaction holds Postgres'
	// global notify lock through the commit's WAL flush. AfterCommit sends
	// the notification instead, once the jobs are visible.
	inserter, err := river.NewClient(riverpgxv5.New(client.Pool()), &river.Config{
		Schema: client.Schema(), Logger: logger,
		FetchCooldown: 24 * time.Hour, FetchPollInterval: 24 * time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating the bus's River client: %w", err)
	}
	return &Bus{
		client:             client,
		inserter:           inserter,
		logger:             logger,
		consumersSQL:       queue.Qualify(client.Schema(), busConsumersSQL),
		laneSQL:            queue.Qualify(client.Schema(), laneReserveSQL),
		riverInsertChannel: queue.RiverInsertChannel(client.Schema()),
	}, nil
}

// AfterCommit wakes River's producers for the consumers' queues once the
// dispatch jobs committed: a read-only NOTIFY, which commits without a WAL
// flush.
func (b *Bus) AfterCommit(ctx context.Context) {
	b.mu.Lock()
	queues := b.queues
	b.mu.Unlock()
	if len(queues) == 0 {
		return
	}
	payloads := make([]string, len(queues))
	for i, q := range queues {
		payloads[i] = fmt.Sprintf(`{"queue": %q}`, q)
	}
	if _, err := b.client.Pool().Exec(context.WithoutCancel(ctx), "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", b.riverInsertChannel, payloads); err != nil {
		// The jobs are there; River's poll finds them without the nudge.
		b.logger.WarnContext(ctx, "error waking River after dispatching events", "error", err)
	}
}

// Name implements queue.OutboxPublisher.
func (b *Bus) Name() string { return "bus" }

// PublishOutbox fans events out in a transaction of its own.
func (b *Bus) PublishOutbox(ctx context.Context, events []queue.OutboxEvent) error {
	err := pgx.BeginFunc(ctx, b.client.Pool(), func(tx pgx.Tx) error {
		return b.PublishOutboxTx(ctx, tx, events)
	})
	if err == nil {
		b.AfterCommit(ctx)
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
}

func (c *busConsumer) wants(ev *queue.OutboxEvent) bool {
	if c.source != "" && ev.SourceService == c.source {
		for _, k := range c.skipOwnKinds {
			if k == ev.EventKind {
				return false
			}
		}
	}
	for _, p := range c.patterns {
		if MatchPattern(p, ev.EventType) {
			return true
		}
	}
	return false
}

type laneKey struct{ consumer, aggregate string }

// PublishOutboxTx inserts the dispatch jobs in tx. events must be in emit
// order: within a (consumer, aggregate) lane they get increasing sequence
// numbers, and only a lane's head is available at once.
func (b *Bus) PublishOutboxTx(ctx context.Context, tx pgx.Tx, events []queue.OutboxEvent) error {
	rows, err := tx.Query(ctx, b.consumersSQL, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("error reading event consumers: %w", err)
	}
	consumers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*busConsumer, error) {
		var c busConsumer
		err := r.Scan(&c.name, &c.patterns, &c.queue, &c.maxAttempts, &c.source, &c.skipOwnKinds, &c.dispatchBatch)
		return &c, err
	})
	if err != nil {
		return fmt.Errorf("error reading event consumers: %w", err)
	}
	queueSet := map[string]bool{}
	for _, c := range consumers {
		queueSet[c.queue] = true
	}
	queues := make([]string, 0, len(queueSet))
	for q := range queueSet {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	b.mu.Lock()
	b.queues = queues
	b.mu.Unlock()

	type delivery struct {
		c    *busConsumer
		ev   *queue.OutboxEvent
		lane laneKey
	}
	var deliveries []delivery
	laneCount := map[laneKey]int64{}
	// Events without an aggregate for a consumer that takes them in
	// batches, in emit order.
	batched := map[*busConsumer][]queue.OutboxEvent{}
	for i := range events {
		ev := &events[i]
		for _, c := range consumers {
			if !c.wants(ev) {
				continue
			}
			if ev.AggregateID == "" && c.dispatchBatch > 1 {
				batched[c] = append(batched[c], *ev)
				continue
			}
			d := delivery{c: c, ev: ev}
			if ev.AggregateID != "" {
				d.lane = laneKey{c.name, ev.AggregateID}
				laneCount[d.lane]++
			}
			deliveries = append(deliveries, d)
		}
	}
	var params []river.InsertManyParams
	for _, c := range consumers {
		evs := batched[c]
		for len(evs) > 0 {
			n := batchLen(evs, c.dispatchBatch)
			var args river.JobArgs = DispatchBatchArgs{Consumer: c.name, Events: evs[:n]}
			if n == 1 {
				args = DispatchArgs{Consumer: c.name, Event: evs[0]}
			}
			params = append(params, river.InsertManyParams{Args: args, InsertOpts: &river.InsertOpts{Queue: c.queue, MaxAttempts: c.maxAttempts}})
			evs = evs[n:]
		}
	}
	if len(deliveries) == 0 && len(params) == 0 {
		return nil
	}

	// Reserve sequence numbers, locking lanes in a fixed order.
	type laneState struct{ next, head int64 }
	lanes := map[laneKey]*laneState{}
	if len(laneCount) > 0 {
		keys := make([]laneKey, 0, len(laneCount))
		for k := range laneCount {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].consumer != keys[j].consumer {
				return keys[i].consumer < keys[j].consumer
			}
			return keys[i].aggregate < keys[j].aggregate
		})
		cs, as, ns := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
		for i, k := range keys {
			cs[i], as[i], ns[i] = k.consumer, k.aggregate, laneCount[k]
		}
		rows, err := tx.Query(ctx, b.laneSQL, customPlan, cs, as, ns, time.Now().UTC())
		if err != nil {
			return fmt.Errorf("error reserving lane sequence numbers: %w", err)
		}
		for rows.Next() {
			var k laneKey
			var head, last int64
			if err := rows.Scan(&k.consumer, &k.aggregate, &head, &last); err != nil {
				rows.Close()
				return fmt.Errorf("error reading lane: %w", err)
			}
			lanes[k] = &laneState{next: last - laneCount[k] + 1, head: head}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("error reserving lane sequence numbers: %w", err)
		}
	}

	for _, d := range deliveries {
		args := DispatchArgs{Consumer: d.c.name, Event: *d.ev}
		opts := &river.InsertOpts{Queue: d.c.queue, MaxAttempts: d.c.maxAttempts}
		if d.ev.AggregateID != "" {
			ls := lanes[d.lane]
			if ls == nil {
				return fmt.Errorf("lane %s/%s was not reserved", d.lane.consumer, d.lane.aggregate)
			}
			args.AggregateID, args.Seq = d.ev.AggregateID, ls.next
			opts.Pending = ls.next > ls.head
			if !opts.Pending {
				opts.Metadata = laneTurnMetadata
			}
			ls.next++
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
	}
	if _, err := b.inserter.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("error inserting %d dispatch jobs: %w", len(params), err)
	}
	b.logger.DebugContext(ctx, "events dispatched", "events", len(events), "dispatches", len(params))
	return nil
}

// DispatchBatchMaxBytes bounds the payload bytes of one batched dispatch
// job: its events travel in the job's args, which River writes three times
// and indexes. An event at least this large goes in a job of its own.
const DispatchBatchMaxBytes = 1 << 20

// batchLen is how many of evs (at least one) the next batched job takes:
// at most max events and DispatchBatchMaxBytes of payload and metadata.
func batchLen(evs []queue.OutboxEvent, max int) int {
	size := 0
	for i := range evs {
		size += eventSize(&evs[i])
		if i > 0 && (i == max || size > DispatchBatchMaxBytes) {
			return i
		}
	}
	return min(len(evs), max)
}

// eventSize approximates an event's size in a job's args: payload,
// metadata and 256 bytes for ids, type and field names.
func eventSize(ev *queue.OutboxEvent) int {
	m := &ev.Metadata
	n := len(ev.Payload) + len(m.CorrelationID) + len(m.CausationID) + len(m.Actor) + 256
	for k, v := range m.Extra {
		n += len(k) + len(v)
	}
	return n
}

// busConsumersSQL reads the consumers that receive new events: those a
// live worker ran within their inactive_after ($1 is now).
const busConsumersSQL = `
SELECT name, patterns, queue, max_attempts, source_service, skip_own_kinds, dispatch_batch
FROM /*schema*/tributary_event_consumer
WHERE inactive_after_ms < 0 OR seen_at >= $1::timestamptz - inactive_after_ms * interval '1 millisecond'
ORDER BY name`

// laneReserveSQL adds $3[i] sequence numbers to each lane (creating it at
// head 1) and returns the lane's head and new last sequence number.
const laneReserveSQL = `
INSERT INTO /*schema*/tributary_event_lane AS l (consumer, aggregate_id, head_seq, last_seq, updated_at)
SELECT u.c, u.a, 1, u.n, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, n, ord)
ORDER BY u.ord
ON CONFLICT (consumer, aggregate_id) DO UPDATE
SET last_seq = l.last_seq + excluded.last_seq, updated_at = excluded.updated_at
RETURNING consumer, aggregate_id, head_seq, last_seq`
