// Package chaos is the workload of the fault-injection suite (`make chaos`,
// the tests tagged chaos in this directory): plain jobs, events with and
// without an aggregate, a cron schedule and a batch stream, run by worker
// processes (chaosworker) that log every handler call to tables, so a test
// can check by id that nothing was lost, count duplicates and check the
// order within each aggregate while it kills processes, restarts Postgres,
// terminates connections and closes AMQP connections.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// Stream is the batch stream the driver stages items into.
const Stream = "chaos"

// ScheduleName is the cron schedule every worker declares: @every 1s.
const ScheduleName = "chaos.tick"

// Exchange is the AMQP exchange the workers' outbox forwarders publish to
// when AMQP_URL is set.
const Exchange = "tributary.chaos"

// ConsumerNames are the event consumers every worker runs: "ordered" has
// DispatchBatch 1 (one dispatch job run per event: each lane event is
// promoted to a job in its turn), "batched" the default (the events without
// an aggregate in batched dispatch jobs, and its lanes chain: the events
// behind a lane's head run in place), so the faults hit both ways through
// the lanes.
var ConsumerNames = []string{"ordered", "batched"}

// WorkArgs is the plain job: it logs its key and sleeps a while, so that a
// kill finds some of them running.
type WorkArgs struct {
	Key     string `json:"key"`
	SleepMS int    `json:"sleep_ms"`
}

// Kind implements river.JobArgs.
func (WorkArgs) Kind() string { return "chaos.work" }

// TickArgs is the cron job: it logs its fire time.
type TickArgs struct{}

// Kind implements river.JobArgs.
func (TickArgs) Kind() string { return "chaos.tick" }

// Payload is the event's payload: N counts the aggregate's events from 1.
type Payload struct {
	N int `json:"n"`
}

// Event is the workload's event type.
var Event = events.Define[Payload]("chaos.note", nil)

// CreateLogsSQL creates the call logs in a schema (through queue.Qualify).
const CreateLogsSQL = `
CREATE TABLE /*schema*/chaos_job_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key text NOT NULL, job_id bigint NOT NULL, attempt integer NOT NULL, process text NOT NULL);
CREATE TABLE /*schema*/chaos_event_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL, event_id uuid NOT NULL, aggregate_id text, n integer NOT NULL, process text NOT NULL);
CREATE TABLE /*schema*/chaos_tick_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fire_at timestamptz NOT NULL, job_id bigint NOT NULL, process text NOT NULL);`

// errInjected is the transient failure some first attempts return, so
// retries run under faults too.
var errInjected = errors.New("chaos: injected transient failure")

// Workers logs what the workload's jobs and handlers do.
type Workers struct {
	pool    *pgxpool.Pool
	process string
	jobSQL  string
	tickSQL string
	evSQL   string
}

// NewWorkers returns the loggers of one worker process.
func NewWorkers(pool *pgxpool.Pool, schema, process string) *Workers {
	q := func(s string) string { return queue.Qualify(schema, s) }
	return &Workers{
		pool: pool, process: process,
		jobSQL:  q(`INSERT INTO /*schema*/chaos_job_log (key, job_id, attempt, process) VALUES ($1, $2, $3, $4)`),
		tickSQL: q(`INSERT INTO /*schema*/chaos_tick_log (fire_at, job_id, process) VALUES ($1, $2, $3)`),
		evSQL:   q(`INSERT INTO /*schema*/chaos_event_log (consumer, event_id, aggregate_id, n, process) VALUES ($1, $2, nullif($3, ''), $4, $5)`),
	}
}

// Register adds the job workers to rt.
func (w *Workers) Register(rt *queue.Runtime) {
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[WorkArgs]) error {
		if job.Args.SleepMS > 0 {
			select {
			case <-time.After(time.Duration(job.Args.SleepMS) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err := w.pool.Exec(ctx, w.jobSQL, job.Args.Key, job.ID, job.Attempt, w.process)
		return err
	}))
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[TickArgs]) error {
		var meta struct {
			FireAt time.Time `json:"tributary_fire_at"`
		}
		if err := json.Unmarshal(job.Metadata, &meta); err != nil || meta.FireAt.IsZero() {
			return river.JobCancel(fmt.Errorf("tick job %d without a fire time in its metadata %s", job.ID, job.Metadata))
		}
		_, err := w.pool.Exec(ctx, w.tickSQL, meta.FireAt, job.ID, w.process)
		return err
	}))
}

// dispatchBatchOf is the DispatchBatch of the consumer name (see
// ConsumerNames): 0 is the default.
func dispatchBatchOf(name string) int {
	if name == "ordered" {
		return 1
	}
	return 0
}

// Consumers returns the workload's consumers: each handler sleeps up to
// 20 ms, fails 2% of first attempts, and logs the call.
func (w *Workers) Consumers() ([]*events.Consumer, error) {
	var out []*events.Consumer
	for _, name := range ConsumerNames {
		c, err := events.NewConsumer(events.ConsumerConfig{Name: name, Queue: "default", DispatchBatch: dispatchBatchOf(name)})
		if err != nil {
			return nil, err
		}
		events.On(c, Event, func(ctx context.Context, m events.Message[Payload]) error {
			time.Sleep(rand.N(20 * time.Millisecond))
			if m.Attempt == 1 && rand.Float64() < 0.02 {
				return errInjected
			}
			_, err := w.pool.Exec(ctx, w.evSQL, m.Consumer, m.ID, m.AggregateID, m.Payload.N, w.process)
			return err
		})
		out = append(out, c)
	}
	return out, nil
}

// ProcessName names a worker process in the logs: CHAOS_NAME, else its pid.
func ProcessName() string {
	if n := os.Getenv("CHAOS_NAME"); n != "" {
		return n
	}
	return fmt.Sprintf("pid-%d", os.Getpid())
}
