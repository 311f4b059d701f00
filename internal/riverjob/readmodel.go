package riverjob

import (
	"fmt"
	"strings"
)

// The dashboard's read model of River's jobs and queues. The dashboard runs
// these in a read transaction of its own (batched, JIT off, custom plans,
// a statement timeout) and pages and filters them itself, so they are
// exported as SQL with /*schema*/ markers; they are owned, and tested
// against River's tables, here. Their costs are bounded by a count cap or
// an index range, never by the size of the job table.

// JobsTable is River's job table aliased j, for the planner's estimates of
// what a capped count cut off (EXPLAIN SELECT 1 FROM JobsTable WHERE ...).
const JobsTable = "/*schema*/river_job j"

// StateType is River's job state type, for casting a state parameter in a
// condition ("j.state = $1::" + StateType).
const StateType = "/*schema*/river_job_state"

// StateCountsSQL counts the jobs in each of states (River's state names,
// written into the SQL as literals: never pass input) through River's
// (state, queue, priority, scheduled_at, id) index; capped, each count
// stops at $1, so the cost is bounded by the cap, not by the table. Each
// state is its own branch with the state as a literal, so each gets a plan
// for its own frequency; the capped count's ORDER BY on the index's
// columns keeps the planner on the index even when its statistics call a
// state common and a sequential scan looks cheaper, which for a state that
// has become rare would read the whole table. Rows: state, count, the
// database's now().
func StateCountsSQL(states []string, capped bool) string {
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

// QueueCountsSQL finds the distinct (state, queue) pairs of the states $1
// by a skip scan over the same index (one index probe per pair instead of
// reading every row), then counts each pair (capped at $2) and, for
// available jobs, finds the oldest scheduled_at with one probe per priority
// (River allows 1 to 4). Rows: state, queue, count, oldest available.
func QueueCountsSQL(capped bool) string {
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

// What the planner is asked to estimate for a count that reached the cap
// (EXPLAIN of it): the jobs in state $1, and in state $1 and queue $2.
const (
	JobStateEstimateSQL      = `SELECT 1 FROM ` + JobsTable + ` WHERE j.state = $1::` + StateType
	JobStateQueueEstimateSQL = JobStateEstimateSQL + ` AND j.queue = $2`
)

// QueuesPausedSQL lists River's queues and whether each is paused.
const QueuesPausedSQL = `SELECT name, paused_at IS NOT NULL FROM /*schema*/river_queue`

// ThroughputSQL counts finalized jobs per minute and state, over the last
// $1 minutes and not before $2, through River's partial (state,
// finalized_at) index: the cost follows the jobs finalized in the window.
const ThroughputSQL = `
SELECT date_trunc('minute', j.finalized_at), j.state::text, count(*)
FROM /*schema*/river_job j
WHERE j.state IN ('completed', 'discarded', 'cancelled')
  AND j.finalized_at >= greatest($2::timestamptz, date_trunc('minute', now()) - make_interval(mins => $1))
GROUP BY 1, 2`

// JobListSQL is the start of a page of jobs: the caller appends only the
// filters that are set as a WHERE over its unqualified columns (state,
// kind, queue, id), so the planner picks the index that fits (the primary
// key for a plain page, River's state or kind index for a rare state or
// kind), then its ORDER BY id DESC and LIMIT; the cursor is keyset on id,
// never OFFSET. Rows: id, kind, queue, state, priority, attempt,
// max_attempts, created_at, scheduled_at, attempted_at, finalized_at, the
// first 121 characters of the args, the number of errors.
const JobListSQL = `
SELECT id, kind, queue, state::text, priority, attempt, max_attempts,
       created_at, scheduled_at, attempted_at, finalized_at,
       left(args::text, 121), coalesce(array_length(errors, 1), 0)
FROM /*schema*/river_job`

// JobKindsSQL lists up to 200 distinct job kinds by a skip scan over
// River's kind index.
const JobKindsSQL = `
WITH RECURSIVE k AS (
    SELECT (SELECT kind FROM /*schema*/river_job ORDER BY kind LIMIT 1) AS kind
  UNION ALL
    SELECT (SELECT j.kind FROM /*schema*/river_job j WHERE j.kind > k.kind ORDER BY j.kind LIMIT 1)
    FROM k WHERE k.kind IS NOT NULL
)
SELECT kind FROM k WHERE kind IS NOT NULL LIMIT 200`
