package queue

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobStates returns River's job states in the order tributary shows them:
// the live states (LiveJobStates), then the finished ones.
func JobStates() []string {
	return append(LiveJobStates(), "completed", "discarded", "cancelled")
}

// LiveJobStates returns the states of jobs that still have work ahead of
// them: together, per queue, the queue's depth.
func LiveJobStates() []string {
	return []string{"available", "running", "retryable", "scheduled", "pending"}
}

// JobStatsParams configures ReadJobStats.
type JobStatsParams struct {
	// CountCap bounds every count: a state (or a state of one queue) is
	// counted exactly up to CountCap jobs, by an index scan that stops
	// there, and above it reported with the planner's estimate, marked
	// Approximate.
	//
	// Defaults to 0: counts are exact, and cost a read of every matching
	// index entry.
	CountCap int

	// QueueStates are the states counted per queue as well as in total; the
	// others are counted in total only.
	//
	// Defaults to LiveJobStates (the queues' depth).
	QueueStates []string
}

// StateCount is the number of jobs in one state.
type StateCount struct {
	State string `json:"state"`
	Count
}

// QueueStats are one queue's jobs in the states JobStatsParams.QueueStates
// breaks down by queue.
type QueueStats struct {
	Queue  string           `json:"queue"`
	Paused bool             `json:"paused"`
	States map[string]Count `json:"states"`
	// OldestAvailableAt is the scheduled time of the queue's longest-waiting
	// available job.
	OldestAvailableAt         *time.Time `json:"oldest_available_at,omitempty"`
	OldestAvailableAgeSeconds float64    `json:"oldest_available_age_seconds"`
}

// JobStats is the read model of River's job table: jobs per state, per
// queue and state, and the oldest available job. The CLI's `stats` and the
// dashboard's overview and metrics read it.
type JobStats struct {
	// TakenAt is the database time of the snapshot.
	TakenAt  time.Time `json:"taken_at"`
	CountCap int       `json:"count_cap"`
	// States holds every state, in JobStates order.
	States []StateCount `json:"states"`
	// Queues holds the queues with jobs in QueueStates, sorted by name.
	Queues []QueueStats `json:"queues"`
	// OldestAvailableAt is over all queues.
	OldestAvailableAt         *time.Time `json:"oldest_available_at,omitempty"`
	OldestAvailableAgeSeconds float64    `json:"oldest_available_age_seconds"`
}

// The statements of the job read model. Each reads River's (state, queue,
// priority, scheduled_at, id) fetch index, so a count costs what the cap
// allows, not what the table holds.

// jobStatesSQL counts each of states over all queues. Each state is its own
// branch with the state as a literal (from JobStates, never from input), so
// each gets a plan for its own frequency; a capped count stops at $1, and
// its ORDER BY on the index's columns keeps the planner on the index even
// when its statistics call a state common and a sequential scan looks
// cheaper, which for a state that has become rare would read the whole
// table.
func jobStatesSQL(states []string, capped bool) string {
	var b strings.Builder
	for i, state := range states {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		if capped {
			fmt.Fprintf(&b, `SELECT '%[1]s', (SELECT count(*) FROM (
    SELECT 1 FROM /*schema*/river_job j WHERE j.state = '%[1]s'
    ORDER BY j.state, j.queue, j.priority, j.scheduled_at, j.id LIMIT $1) capped), now()`, state)
		} else {
			fmt.Fprintf(&b, `SELECT '%[1]s', (SELECT count(*) FROM /*schema*/river_job j WHERE j.state = '%[1]s'), now()`, state)
		}
	}
	return b.String()
}

// jobQueuesSQL finds the distinct (state, queue) pairs of the states in $1
// by a skip scan over the same index (one index probe per pair instead of
// reading every row), then counts each pair (capped at $2) and, for
// available jobs, finds the oldest scheduled_at with one probe per priority
// (River allows 1 to 4).
func jobQueuesSQL(capped bool) string {
	count := `(SELECT count(*) FROM /*schema*/river_job j WHERE j.state = l.state AND j.queue = l.queue)`
	if capped {
		count = `(SELECT count(*) FROM (
            SELECT 1 FROM /*schema*/river_job j WHERE j.state = l.state AND j.queue = l.queue
            ORDER BY j.state, j.queue, j.priority, j.scheduled_at, j.id LIMIT $2
        ) capped)`
	}
	return `
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
       ` + count + `,
       CASE WHEN l.state = 'available' THEN (
            SELECT min(o.scheduled_at)
            FROM generate_series(1, 4) AS p(priority),
                 LATERAL (SELECT j.scheduled_at FROM /*schema*/river_job j
                          WHERE j.state = 'available' AND j.queue = l.queue AND j.priority = p.priority
                          ORDER BY j.scheduled_at LIMIT 1) o)
       END
FROM live l
WHERE l.queue IS NOT NULL`
}

const jobQueuesPausedSQL = `SELECT name, paused_at IS NOT NULL FROM /*schema*/river_queue`

// What the planner is asked to estimate for a count that reached the cap.
const (
	jobStateEstimateSQL      = `SELECT 1 FROM /*schema*/river_job j WHERE j.state = $1::/*schema*/river_job_state`
	jobStateQueueEstimateSQL = jobStateEstimateSQL + ` AND j.queue = $2`
)

// ReadJobStats reads the job read model in tx, which should come from
// ReadTx: its statements rely on JIT being off and on custom plans.
func ReadJobStats(ctx context.Context, tx pgx.Tx, schema string, p JobStatsParams) (*JobStats, error) {
	queueStates := p.QueueStates
	if queueStates == nil {
		queueStates = LiveJobStates()
	}
	var totalStates []string
	for _, state := range JobStates() {
		if !slices.Contains(queueStates, state) {
			totalStates = append(totalStates, state)
		}
	}
	capped := p.CountCap > 0
	var limit []any // the cap's parameter, when there is one
	if capped {
		limit = []any{p.CountCap}
	}
	q := func(sql string) string { return Qualify(schema, sql) }
	st := &JobStats{CountCap: p.CountCap, States: []StateCount{}, Queues: []QueueStats{}}

	batch := &pgx.Batch{}
	if len(totalStates) > 0 {
		batch.Queue(q(jobStatesSQL(totalStates, capped)), limit...)
	} else {
		batch.Queue("SELECT now()")
	}
	batch.Queue(q(jobQueuesSQL(capped)), append([]any{queueStates}, limit...)...)
	batch.Queue(q(jobQueuesPausedSQL))
	br := tx.SendBatch(ctx, batch)
	defer br.Close()

	// Totals of the states not broken down by queue.
	totals := map[string]int64{}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("error counting jobs by state: %w", err)
	}
	for rows.Next() {
		var state string
		var n int64
		if len(totalStates) == 0 {
			err = rows.Scan(&st.TakenAt)
		} else {
			err = rows.Scan(&state, &n, &st.TakenAt)
		}
		if err != nil {
			return nil, fmt.Errorf("error scanning job counts: %w", err)
		}
		totals[state] = n
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
	type pair struct{ state, queue string }
	var cappedPairs []pair
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
		if capped && n >= int64(p.CountCap) {
			cappedPairs = append(cappedPairs, pair{state, name})
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
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("error reading job counts: %w", err)
	}

	// Estimates for whatever reached the cap: a planner estimate costs a
	// plan, not a scan.
	for _, pr := range cappedPairs {
		est, err := EstimateRows(ctx, tx, q(jobStateQueueEstimateSQL), pr.state, pr.queue)
		if err != nil {
			return nil, err
		}
		qs := byQueue[pr.queue]
		qs.States[pr.state] = Count{N: max(est, qs.States[pr.state].N), Approximate: true}
	}
	for _, state := range JobStates() {
		var c Count
		if slices.Contains(queueStates, state) {
			// The sum over the queues (approximate when one of them is), so
			// these jobs are counted once, not twice.
			for _, qs := range byQueue {
				qc := qs.States[state]
				c.N += qc.N
				c.Approximate = c.Approximate || qc.Approximate
			}
		} else {
			c.N = totals[state]
			if capped && c.N >= int64(p.CountCap) {
				est, err := EstimateRows(ctx, tx, q(jobStateEstimateSQL), state)
				if err != nil {
					return nil, err
				}
				c = Count{N: max(est, c.N), Approximate: true}
			}
		}
		st.States = append(st.States, StateCount{State: state, Count: c})
	}

	for _, qs := range byQueue {
		if qs.OldestAvailableAt != nil {
			qs.OldestAvailableAgeSeconds = max(0, st.TakenAt.Sub(*qs.OldestAvailableAt).Seconds())
			if st.OldestAvailableAt == nil || qs.OldestAvailableAt.Before(*st.OldestAvailableAt) {
				st.OldestAvailableAt = qs.OldestAvailableAt
				st.OldestAvailableAgeSeconds = qs.OldestAvailableAgeSeconds
			}
		}
		st.Queues = append(st.Queues, *qs)
	}
	sort.Slice(st.Queues, func(i, j int) bool { return st.Queues[i].Queue < st.Queues[j].Queue })
	return st, nil
}
