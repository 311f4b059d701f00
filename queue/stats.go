package queue

import (
	"context"
	"fmt"
	"time"
)

// QueueStateCount is the number of jobs of one queue in one state.
type QueueStateCount struct {
	Queue string `json:"queue"`
	State string `json:"state"`
	Count int64  `json:"count"`
}

// Stats is a snapshot of the job table for operators.
type Stats struct {
	// ByState counts jobs per state over all queues.
	ByState map[string]int64 `json:"by_state"`
	// ByQueue counts jobs per queue and state, sorted by queue then state.
	ByQueue []QueueStateCount `json:"by_queue"`
	// Total is the sum over all states.
	Total int64 `json:"total"`
	// OldestAvailableAt is when the longest-waiting available job became
	// runnable; nil when no job is available.
	OldestAvailableAt *time.Time `json:"oldest_available_at,omitempty"`
	// OldestAvailableAgeSeconds is how long that job has waited.
	OldestAvailableAgeSeconds float64 `json:"oldest_available_age_seconds"`
	// TakenAt is the database time of the snapshot.
	TakenAt time.Time `json:"taken_at"`
}

const statsCountsSQL = `
SELECT queue, state::text, count(*)
FROM /*schema*/river_job
GROUP BY queue, state
ORDER BY queue, state`

const statsOldestSQL = `
SELECT min(scheduled_at), now()
FROM /*schema*/river_job
WHERE state = 'available'`

// Stats counts jobs by state and queue and finds the oldest available job.
// It reads the whole job table; dashboards on very large tables use their
// own cached read model.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	st := &Stats{ByState: map[string]int64{}, ByQueue: []QueueStateCount{}}
	rows, err := c.pool.Query(ctx, Qualify(c.schema, statsCountsSQL))
	if err != nil {
		return nil, fmt.Errorf("error counting jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var qc QueueStateCount
		if err := rows.Scan(&qc.Queue, &qc.State, &qc.Count); err != nil {
			return nil, fmt.Errorf("error scanning job counts: %w", err)
		}
		st.ByQueue = append(st.ByQueue, qc)
		st.ByState[qc.State] += qc.Count
		st.Total += qc.Count
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error counting jobs: %w", err)
	}
	var oldest *time.Time
	if err := c.pool.QueryRow(ctx, Qualify(c.schema, statsOldestSQL)).Scan(&oldest, &st.TakenAt); err != nil {
		return nil, fmt.Errorf("error finding the oldest available job: %w", err)
	}
	if oldest != nil {
		st.OldestAvailableAt = oldest
		st.OldestAvailableAgeSeconds = max(0, st.TakenAt.Sub(*oldest).Seconds())
	}
	return st, nil
}
