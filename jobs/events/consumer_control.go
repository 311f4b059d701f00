package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// ConsumerInfo is a consumer as the database records it.
type ConsumerInfo struct {
	Name          string   `json:"name"`
	Patterns      []string `json:"patterns"`
	Queue         string   `json:"queue"`
	Ordering      Ordering `json:"ordering"`
	SourceService string   `json:"source_service,omitempty"`
	// RegisteredAt is when a worker running it last started.
	RegisteredAt time.Time `json:"registered_at"`
	// SeenAt is when a live worker last recorded that it runs the consumer
	// (at start and every ConsumerHeartbeatInterval).
	SeenAt time.Time `json:"seen_at"`
	// InactiveAfter is ConsumerConfig.InactiveAfter, "never" when negative.
	InactiveAfter string `json:"inactive_after"`
	// Active is false once no live worker ran it for InactiveAfter: it
	// receives no new events.
	Active bool `json:"active"`
	// Pending counts its unfinished dispatch jobs (waiting, running or
	// retrying; a batched dispatch counts once).
	Pending int64 `json:"pending"`
	// BlockedLanes counts its aggregates held by a given-up head.
	BlockedLanes int64 `json:"blocked_lanes"`
}

// ListConsumers lists every consumer by name. Pending is counted over the
// unfinished dispatch jobs (CountPendingDispatches), not the whole job
// table.
func ListConsumers(ctx context.Context, db queue.DBTX, schema string) ([]ConsumerInfo, error) {
	out, err := ListConsumersUncounted(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	pending, err := CountPendingDispatches(ctx, db, schema)
	if err != nil {
		return nil, fmt.Errorf("error listing consumers: %w", err)
	}
	for i := range out {
		out[i].Pending = pending[out[i].Name]
	}
	return out, nil
}

// CountPendingDispatches counts each consumer's unfinished dispatch jobs
// (ConsumerInfo.Pending) by consumer name, lane events included. It reads every one of them, so
// its cost grows with the backlog (a few hundred milliseconds for 20,000
// jobs scattered over a 10,000,000-job table): a caller asked often (the
// dashboard's /metrics) reads it on a schedule of its own.
func CountPendingDispatches(ctx context.Context, db queue.DBTX, schema string) (map[string]int64, error) {
	out, err := riverjob.CountUnfinishedDispatches(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	// Lane events are dispatches whose job is not inserted yet.
	waiting, err := newLanes(schema).countEvents(ctx, db)
	if err != nil {
		return nil, err
	}
	for c, n := range waiting {
		out[c] += n
	}
	return out, nil
}

// ListConsumersUncounted is ListConsumers with Pending left 0, for a
// caller that counts those with CountPendingDispatches on its own
// schedule; the rest costs a read of the consumer and lane tables.
func ListConsumersUncounted(ctx context.Context, db queue.DBTX, schema string) ([]ConsumerInfo, error) {
	rows, err := db.Query(ctx, queue.Qualify(schema, listConsumersSQL), time.Now().UTC())
	if err != nil {
		return nil, fmt.Errorf("error listing consumers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ConsumerInfo, error) {
		var c ConsumerInfo
		var ordering string
		var inactiveMS int64
		err := r.Scan(&c.Name, &c.Patterns, &c.Queue, &ordering, &c.SourceService, &c.RegisteredAt, &c.SeenAt,
			&inactiveMS, &c.Active)
		c.Ordering = Ordering(ordering)
		c.InactiveAfter = "never"
		if inactiveMS >= 0 {
			c.InactiveAfter = (time.Duration(inactiveMS) * time.Millisecond).String()
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing consumers: %w", err)
	}
	blocked, err := newLanes(schema).blockedCounts(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("error listing consumers: %w", err)
	}
	for i := range out {
		out[i].BlockedLanes = blocked[out[i].Name]
	}
	return out, nil
}

// ConsumerLiveWithin is how recently a worker must have recorded a consumer
// for RemoveConsumer to take it for live and refuse without Force: a few
// heartbeats.
const ConsumerLiveWithin = 5 * ConsumerHeartbeatInterval

// ErrConsumerLive is returned (wrapped) by RemoveConsumer for a consumer a
// live worker runs.
var ErrConsumerLive = errors.New("a live worker runs this consumer")

// RemoveConsumerOpts are RemoveConsumer's options.
type RemoveConsumerOpts struct {
	// Force removes a consumer that a worker recorded within
	// ConsumerLiveWithin. That worker keeps running its dispatch jobs
	// already fetched, and registers the consumer again when it restarts.
	Force bool
}

// RemovedConsumer is what RemoveConsumer deleted.
type RemovedConsumer struct {
	Name string `json:"name"`
	// Jobs is the unfinished dispatch jobs (and lane events) deleted; Running those left to
	// finish (River does not delete a running job): a worker that does not
	// run the consumer cancels them when they end, with the reason.
	Jobs    int64 `json:"jobs"`
	Running int64 `json:"running"`
	Lanes   int64 `json:"lanes"`
}

// consumerRemoveBatch bounds one delete statement of RemoveConsumer.
const consumerRemoveBatch = 5000

// RemoveConsumer removes a consumer that no worker runs any more (renamed or
// removed from the code): its row first, so forwarders stop creating work
// for it, then its unfinished dispatch jobs and its lanes, in bounded
// batches. Its finished jobs stay until River's retention. A name with no
// row but with jobs or lanes left (an interrupted removal) is cleaned up
// too; a name with none of them is ErrUnknownConsumer.
func RemoveConsumer(ctx context.Context, pool *pgxpool.Pool, schema, name string, opts RemoveConsumerOpts) (*RemovedConsumer, error) {
	res := &RemovedConsumer{Name: name}
	now := time.Now().UTC()
	var found bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var seenAt time.Time
		err := tx.QueryRow(ctx, queue.Qualify(schema, lockConsumerSQL), name).Scan(&seenAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("error reading consumer %q: %w", name, err)
		}
		found = true
		if ago := now.Sub(seenAt); ago < ConsumerLiveWithin && !opts.Force {
			return fmt.Errorf("consumer %q was seen by a live worker %s ago: %w; stop the workers that run it first, or force the removal",
				name, ago.Round(time.Second), ErrConsumerLive)
		}
		_, err = tx.Exec(ctx, queue.Qualify(schema, deleteConsumerSQL), name)
		return err
	})
	if err != nil {
		return nil, err
	}
	ls := newLanes(schema)
	if res.Jobs, err = inBatches(func() (int64, error) {
		return riverjob.DeleteWaitingDispatches(ctx, pool, schema, name, consumerRemoveBatch)
	}); err != nil {
		return nil, err
	}
	waiting, err := inBatches(func() (int64, error) {
		return ls.deleteConsumerEvents(ctx, pool, name, consumerRemoveBatch)
	})
	if err != nil {
		return nil, err
	}
	res.Jobs += waiting
	if res.Lanes, err = inBatches(func() (int64, error) {
		return ls.deleteConsumer(ctx, pool, name, consumerRemoveBatch)
	}); err != nil {
		return nil, err
	}
	if res.Running, err = riverjob.CountRunningDispatches(ctx, pool, schema, name); err != nil {
		return nil, err
	}
	if !found && res.Jobs == 0 && res.Lanes == 0 && res.Running == 0 {
		return nil, fmt.Errorf("%w %q", ErrUnknownConsumer, name)
	}
	return res, nil
}

// inBatches runs remove, which deletes at most consumerRemoveBatch rows,
// until it deletes fewer, and returns the total.
func inBatches(remove func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := remove()
		total += n
		if err != nil || n < consumerRemoveBatch {
			return total, err
		}
	}
}

const listConsumersSQL = `
SELECT name, patterns, queue, ordering, source_service, updated_at, seen_at, inactive_after_ms,
       inactive_after_ms < 0 OR seen_at >= $1::timestamptz - inactive_after_ms * interval '1 millisecond'
FROM /*schema*/tributary_event_consumer
ORDER BY name`

const lockConsumerSQL = `
SELECT seen_at FROM /*schema*/tributary_event_consumer WHERE name = $1 FOR UPDATE`

const deleteConsumerSQL = `
DELETE FROM /*schema*/tributary_event_consumer WHERE name = $1`
