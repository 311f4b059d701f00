package queue

import (
	"fmt"
	"strings"
)

// The statements of the job read model, on River's job and queue tables.
// Each reads River's (state, queue, priority, scheduled_at, id) fetch
// index, so a capped count costs what the cap allows, not what the table
// holds; an exact one (no cap) reads every matching index entry.

// stateCountsSQL counts each of states over all queues. Each state is its own
// branch with the state as a literal (from JobStates, never from input), so
// each gets a plan for its own frequency; a capped count stops at $1, and
// its ORDER BY on the index's columns keeps the planner on the index even
// when its statistics call a state common and a sequential scan looks
// cheaper, which for a state that has become rare would read the whole
// table.
func stateCountsSQL(states []string, capped bool) string {
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

// queueCountsSQL finds the distinct (state, queue) pairs of the states in $1
// by a skip scan over the same index (one index probe per pair instead of
// reading every row), then counts each pair (capped at $2) and, for
// available jobs, finds the oldest scheduled_at with one probe per priority
// (River allows 1 to 4).
func queueCountsSQL(capped bool) string {
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

const queuesPausedSQL = `SELECT name, paused_at IS NOT NULL FROM /*schema*/river_queue`

// What the planner is asked to estimate for a count that reached the cap.
const (
	jobStateEstimateSQL      = `SELECT 1 FROM /*schema*/river_job j WHERE j.state = $1::/*schema*/river_job_state`
	jobStateQueueEstimateSQL = jobStateEstimateSQL + ` AND j.queue = $2`
)
