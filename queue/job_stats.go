package queue

import (
	"context"
	"fmt"
	"github.com/tributary-run/tributary/internal/riverjob"
	"slices"
	"sort"
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
		batch.Queue(q(riverjob.StateCountsSQL(totalStates, capped)), limit...)
	} else {
		batch.Queue("SELECT now()")
	}
	batch.Queue(q(riverjob.QueueCountsSQL(capped)), append([]any{queueStates}, limit...)...)
	batch.Queue(q(riverjob.QueuesPausedSQL))
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
		est, err := EstimateRows(ctx, tx, q(riverjob.JobStateQueueEstimateSQL), pr.state, pr.queue)
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
				est, err := EstimateRows(ctx, tx, q(riverjob.JobStateEstimateSQL), state)
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
