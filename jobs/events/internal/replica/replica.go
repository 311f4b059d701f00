// Package replica is the workload of the events replica tests: two
// consumers whose handlers sleep a random while, fail transiently at a
// given rate, and log each successful call to a table, so a test can check
// delivery and per-aggregate order across processes.
package replica

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// Payload is the test event's payload.
type Payload struct {
	N int `json:"n"`
}

// Event is the test event.
var Event = events.Define[Payload]("replica.note", nil)

// ConsumerNames are the consumers every replica runs.
var ConsumerNames = []string{"alpha", "beta"}

// CreateLogSQL creates the call log in a schema (run through queue.Qualify).
const CreateLogSQL = `CREATE TABLE /*schema*/replica_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL, event_id uuid NOT NULL, aggregate_id text, n integer NOT NULL, replica text NOT NULL)`

// ErrTransient is the injected handler failure.
var ErrTransient = errors.New("injected transient failure")

// Config shapes the workload.
type Config struct {
	Schema       string
	Replica      string
	FailRate     float64
	MaxLatency   time.Duration
	RetryDelay   time.Duration
	HandlerCount func()
}

// dispatchBatchOf is consumer name's DispatchBatch: "beta" the default
// (0), the others 1.
func dispatchBatchOf(name string) int {
	if name == "beta" {
		return 0
	}
	return 1
}

// Consumers returns fresh consumers for one replica.
func Consumers(pool *pgxpool.Pool, cfg Config) ([]*events.Consumer, error) {
	insert := queue.Qualify(cfg.Schema, `INSERT INTO /*schema*/replica_log (consumer, event_id, aggregate_id, n, replica) VALUES ($1, $2, nullif($3, ''), $4, $5)`)
	var out []*events.Consumer
	for _, name := range ConsumerNames {
		c, err := events.NewConsumer(events.ConsumerConfig{
			Name:  name,
			Queue: "default",
			// One consumer's lanes chain (the default: lane events run in
			// place), the other's run one River job per event.
			DispatchBatch: dispatchBatchOf(name),
			RetryDelays:   []time.Duration{cfg.RetryDelay, cfg.RetryDelay, cfg.RetryDelay, cfg.RetryDelay, cfg.RetryDelay},
		})
		if err != nil {
			return nil, err
		}
		events.On(c, Event, func(ctx context.Context, m events.Message[Payload]) error {
			if cfg.MaxLatency > 0 {
				time.Sleep(rand.N(cfg.MaxLatency))
			}
			if rand.Float64() < cfg.FailRate {
				return ErrTransient
			}
			_, err := pool.Exec(ctx, insert, m.Consumer, m.ID, m.AggregateID, m.Payload.N, cfg.Replica)
			return err
		})
		out = append(out, c)
	}
	return out, nil
}
