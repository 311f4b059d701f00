package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// JobStates are River's job states in the order the dashboard shows them.
var jobStates = []string{"available", "running", "retryable", "scheduled", "pending", "completed", "discarded", "cancelled"}

// liveStates are the states of jobs that still have work ahead of them;
// the overview breaks them down by queue.
var liveStates = []string{"available", "running", "retryable", "scheduled", "pending"}

// finalStates are the states of finished jobs. Live states are counted per
// queue and summed; these are counted on their own.
var finalStates = []string{"completed", "discarded", "cancelled"}

// Count is a number of rows that is exact up to the count cap and the
// planner's estimate above it.
type Count struct {
	N           int64 `json:"n"`
	Approximate bool  `json:"approximate,omitempty"`
}

// StateCount is the number of jobs in one state.
type StateCount struct {
	State string `json:"state"`
	Count
}

// QueueStats are one queue's live jobs.
type QueueStats struct {
	Queue  string           `json:"queue"`
	Paused bool             `json:"paused"`
	States map[string]Count `json:"states"`
	// OldestAvailableAt is the scheduled time of the queue's longest-waiting
	// available job.
	OldestAvailableAt         *time.Time `json:"oldest_available_at,omitempty"`
	OldestAvailableAgeSeconds float64    `json:"oldest_available_age_seconds"`
}

// ThroughputPoint is one minute of finalized jobs.
type ThroughputPoint struct {
	Minute    time.Time `json:"minute"`
	Completed int64     `json:"completed"`
	Discarded int64     `json:"discarded"`
	Cancelled int64     `json:"cancelled"`
}

// Overview is the dashboard's landing page.
type Overview struct {
	TakenAt  time.Time    `json:"taken_at"`
	CountCap int          `json:"count_cap"`
	States   []StateCount `json:"states"`
	Queues   []QueueStats `json:"queues"`
	// Throughput counts finalized jobs per minute, oldest first; the last
	// point is the current, partial minute.
	Throughput []ThroughputPoint `json:"throughput"`
	// OldestAvailableAt is over all queues.
	OldestAvailableAt         *time.Time `json:"oldest_available_at,omitempty"`
	OldestAvailableAgeSeconds float64    `json:"oldest_available_age_seconds"`
}

// overviewStatesSQL counts each state through River's (state, queue,
// priority, scheduled_at, id) index, stopping at the cap ($1): the cost is
// bounded by the cap, not by the table. Each state is its own branch with
// the state as a literal (from jobStates, never from input), so each gets a
// plan for its own frequency; the ORDER BY on the index's columns keeps the
// planner on the index even when its statistics call a state common and a
// sequential scan looks cheaper, which for a state that has become rare
// would read the whole table.
func overviewStatesSQL() string {
	var b strings.Builder
	for i, state := range finalStates {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		fmt.Fprintf(&b, `SELECT '%[1]s', (SELECT count(*) FROM (
    SELECT 1 FROM /*schema*/river_job j WHERE j.state = '%[1]s'
    ORDER BY j.state, j.queue, j.priority, j.scheduled_at, j.id LIMIT $1) capped), now()`, state)
	}
	return b.String()
}

// Distinct (state, queue) pairs of live jobs by a skip scan over the same
// index (one index probe per pair instead of reading every row), then a
// capped count per pair and, for available jobs, the oldest scheduled_at
// found with one probe per priority (River allows 1 to 4).
const overviewQueuesSQL = `
WITH RECURSIVE live AS (
    SELECT s.state,
           (SELECT j.queue FROM /*schema*/river_job j WHERE j.state = s.state ORDER BY j.queue LIMIT 1) AS queue
    FROM unnest($1::text[]::/*schema*/river_job_state[]) AS s(state)
  UNION ALL
    SELECT l.state,
           (SELECT j.queue FROM /*schema*/river_job j WHERE j.state = l.state AND j.queue > l.queue ORDER BY j.queue LIMIT 1)
    FROM live l
    WHERE l.queue IS NOT NULL
)
SELECT l.state::text, l.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM /*schema*/river_job j WHERE j.state = l.state AND j.queue = l.queue
            ORDER BY j.state, j.queue, j.priority, j.scheduled_at, j.id LIMIT $2
        ) capped),
       CASE WHEN l.state = 'available' THEN (
            SELECT min(o.scheduled_at)
            FROM generate_series(1, 4) AS p(priority),
                 LATERAL (SELECT j.scheduled_at FROM /*schema*/river_job j
                          WHERE j.state = 'available' AND j.queue = l.queue AND j.priority = p.priority
                          ORDER BY j.scheduled_at LIMIT 1) o)
       END
FROM live l
WHERE l.queue IS NOT NULL`

const overviewPausedSQL = `SELECT name, paused_at IS NOT NULL FROM /*schema*/river_queue`

// Finalized jobs per minute through River's partial (state, finalized_at)
// index: the cost follows the jobs finalized in the window.
const overviewThroughputSQL = `
SELECT date_trunc('minute', j.finalized_at), j.state::text, count(*)
FROM /*schema*/river_job j
WHERE j.state IN ('completed', 'discarded', 'cancelled')
  AND j.finalized_at >= greatest($2::timestamptz, date_trunc('minute', now()) - make_interval(mins => $1))
GROUP BY 1, 2`

// Overview reads the overview. Its cost does not grow with the number of
// finalized jobs beyond the throughput window.
func (s *Server) Overview(ctx context.Context) (*Overview, error) {
	var ov *Overview
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		ov, err = s.overview(ctx, tx, true)
		return err
	})
	return ov, err
}

// overview reads the overview in tx; withThroughput false leaves the
// throughput out (the metrics scrape does not export it).
func (s *Server) overview(ctx context.Context, tx pgx.Tx, withThroughput bool) (*Overview, error) {
	minutes := int(s.cfg.ThroughputWindow / time.Minute)
	ov := &Overview{CountCap: s.cfg.CountCap, States: []StateCount{}, Queues: []QueueStats{}}

	var queriedFrom time.Time
	batch := &pgx.Batch{}
	batch.Queue(s.q(s.statesSQL), s.cfg.CountCap)
	batch.Queue(s.q(overviewQueuesSQL), liveStates, s.cfg.CountCap)
	batch.Queue(s.q(overviewPausedSQL))
	if withThroughput {
		queriedFrom = s.throughput.uncachedFrom()
		batch.Queue(s.q(overviewThroughputSQL), minutes-1, queriedFrom)
	}
	br := tx.SendBatch(ctx, batch)
	defer br.Close()

	// States.
	counts := map[string]int64{}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("error counting jobs by state: %w", err)
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n, &ov.TakenAt); err != nil {
			return nil, fmt.Errorf("error scanning job counts: %w", err)
		}
		counts[state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error counting jobs by state: %w", err)
	}

	// Queues.
	byQueue := map[string]*QueueStats{}
	queueOf := func(name string) *QueueStats {
		qs := byQueue[name]
		if qs == nil {
			qs = &QueueStats{Queue: name, States: map[string]Count{}}
			byQueue[name] = qs
		}
		return qs
	}
	type capped struct{ state, queue string }
	var cappedPairs []capped
	rows, err = br.Query()
	if err != nil {
		return nil, fmt.Errorf("error counting jobs by queue: %w", err)
	}
	for rows.Next() {
		var state, name string
		var n int64
		var oldest *time.Time
		if err := rows.Scan(&state, &name, &n, &oldest); err != nil {
			return nil, fmt.Errorf("error scanning queue counts: %w", err)
		}
		qs := queueOf(name)
		qs.States[state] = Count{N: n}
		if n >= int64(s.cfg.CountCap) {
			cappedPairs = append(cappedPairs, capped{state, name})
		}
		if oldest != nil {
			qs.OldestAvailableAt = oldest
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error counting jobs by queue: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return nil, fmt.Errorf("error reading queues: %w", err)
	}
	for rows.Next() {
		var name string
		var paused bool
		if err := rows.Scan(&name, &paused); err != nil {
			return nil, fmt.Errorf("error scanning queues: %w", err)
		}
		queueOf(name).Paused = paused
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading queues: %w", err)
	}

	// Throughput.
	perMinute := map[time.Time]*ThroughputPoint{}
	if withThroughput {
		if err := readThroughput(br, perMinute); err != nil {
			return nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("error reading the overview: %w", err)
	}

	// Estimates for whatever reached the cap: a planner estimate costs a
	// plan, not a scan.
	for _, p := range cappedPairs {
		est, err := s.estimate(ctx, tx, "j.state = $1::/*schema*/river_job_state AND j.queue = $2", p.state, p.queue)
		if err != nil {
			return nil, err
		}
		qs := byQueue[p.queue]
		qs.States[p.state] = Count{N: max(est, qs.States[p.state].N), Approximate: true}
	}
	// A live state's count is the sum over its queues (approximate when one
	// of them is), so live jobs are counted once, not twice.
	for _, state := range liveStates {
		var c Count
		for _, qs := range byQueue {
			qc := qs.States[state]
			c.N += qc.N
			c.Approximate = c.Approximate || qc.Approximate
		}
		ov.States = append(ov.States, StateCount{State: state, Count: c})
	}
	for _, state := range finalStates {
		n := counts[state]
		c := Count{N: n}
		if n >= int64(s.cfg.CountCap) {
			est, err := s.estimate(ctx, tx, "j.state = $1::/*schema*/river_job_state", state)
			if err != nil {
				return nil, err
			}
			c = Count{N: max(est, n), Approximate: true}
		}
		ov.States = append(ov.States, StateCount{State: state, Count: c})
	}

	for _, qs := range byQueue {
		if qs.OldestAvailableAt != nil {
			qs.OldestAvailableAgeSeconds = max(0, ov.TakenAt.Sub(*qs.OldestAvailableAt).Seconds())
			if ov.OldestAvailableAt == nil || qs.OldestAvailableAt.Before(*ov.OldestAvailableAt) {
				ov.OldestAvailableAt = qs.OldestAvailableAt
				ov.OldestAvailableAgeSeconds = qs.OldestAvailableAgeSeconds
			}
		}
		ov.Queues = append(ov.Queues, *qs)
	}
	sort.Slice(ov.Queues, func(i, j int) bool { return ov.Queues[i].Queue < ov.Queues[j].Queue })

	if withThroughput {
		ov.Throughput = s.throughput.merge(ov.TakenAt, minutes, queriedFrom, perMinute)
	}
	return ov, nil
}

// estimate asks the planner how many river_job rows (alias j) match cond,
// a constant of the dashboard's with parameters args.
func (s *Server) estimate(ctx context.Context, db queue.DBTX, cond string, args ...any) (int64, error) {
	return s.estimateFrom(ctx, db, "/*schema*/river_job j", cond, args...)
}

// estimateFrom asks the planner how many rows of from match cond. A plan
// costs a fraction of a millisecond whatever the table's size.
func (s *Server) estimateFrom(ctx context.Context, db queue.DBTX, from, cond string, args ...any) (int64, error) {
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	var raw []byte
	sql := s.q("EXPLAIN (FORMAT JSON) SELECT 1 FROM " + from + " WHERE " + cond)
	if err := db.QueryRow(ctx, sql, args...).Scan(&raw); err != nil {
		return 0, fmt.Errorf("error estimating a row count: %w", err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) == 0 {
		return 0, fmt.Errorf("error reading the planner's estimate: %v", err)
	}
	return int64(plan[0].Plan.Rows), nil
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// readTx runs fn in a read-only transaction with JIT off, custom plans and
// a statement timeout. JIT matters: the overview's recursive skip scan has a
// large planner cost (the planner cannot know how few queues there are) that
// passes jit_above_cost, and compiling it takes far longer than running it.
// Custom plans matter because pgx prepares statements: after five runs
// Postgres may switch to a generic plan, which for "state = $1" assumes an
// average state and can walk the primary key through the whole table for a
// state that has no jobs.
func (s *Server) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		timeout := strconv.FormatInt(s.cfg.QueryTimeout.Milliseconds(), 10)
		if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true), set_config('statement_timeout', $1, true)", timeout); err != nil {
			return fmt.Errorf("error preparing a read transaction: %w", err)
		}
		return fn(tx)
	})
}

// q qualifies a SQL constant with the dashboard's schema.
func (s *Server) q(sql string) string { return queue.Qualify(s.schema, sql) }

// readThroughput reads the throughput query's rows from the batch.
func readThroughput(br pgx.BatchResults, perMinute map[time.Time]*ThroughputPoint) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("error reading throughput: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var minute time.Time
		var state string
		var n int64
		if err := rows.Scan(&minute, &state, &n); err != nil {
			return fmt.Errorf("error scanning throughput: %w", err)
		}
		p := perMinute[minute.UTC()]
		if p == nil {
			p = &ThroughputPoint{Minute: minute.UTC()}
			perMinute[minute.UTC()] = p
		}
		switch state {
		case "completed":
			p.Completed = n
		case "discarded":
			p.Discarded = n
		case "cancelled":
			p.Cancelled = n
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("error reading throughput: %w", err)
	}
	return nil
}
