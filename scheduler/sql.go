package scheduler

// SQL on tributary_schedule, with /*schema*/ markers for queue.Qualify.

const upsertScheduleSQL = `
INSERT INTO /*schema*/tributary_schedule AS s
    (name, spec, timezone, kind, args, insert_opts, catch_up, catch_up_max, overlap,
     next_run_at, fired_count, skipped_count, paused, declared_at, orphaned_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 0, false, $11, NULL, $11, $11)
ON CONFLICT (name) DO UPDATE SET
    -- A changed spec or timezone is a new timetable: it starts from now.
    next_run_at  = CASE WHEN (s.spec, s.timezone) IS DISTINCT FROM (EXCLUDED.spec, EXCLUDED.timezone)
                        THEN EXCLUDED.next_run_at ELSE s.next_run_at END,
    updated_at   = CASE WHEN (s.spec, s.timezone, s.kind, s.args, s.insert_opts, s.catch_up, s.catch_up_max, s.overlap)
                        IS DISTINCT FROM (EXCLUDED.spec, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.args,
                                          EXCLUDED.insert_opts, EXCLUDED.catch_up, EXCLUDED.catch_up_max, EXCLUDED.overlap)
                        THEN EXCLUDED.updated_at ELSE s.updated_at END,
    spec         = EXCLUDED.spec,
    timezone     = EXCLUDED.timezone,
    kind         = EXCLUDED.kind,
    args         = EXCLUDED.args,
    insert_opts  = EXCLUDED.insert_opts,
    catch_up     = EXCLUDED.catch_up,
    catch_up_max = EXCLUDED.catch_up_max,
    overlap      = EXCLUDED.overlap,
    declared_at  = EXCLUDED.declared_at,
    orphaned_at  = NULL`

const markOrphansSQL = `
UPDATE /*schema*/tributary_schedule
SET orphaned_at = $2
WHERE NOT (name = ANY($1::text[])) AND orphaned_at IS NULL`

const listOrphansSQL = `
SELECT name, orphaned_at FROM /*schema*/tributary_schedule
WHERE orphaned_at IS NOT NULL ORDER BY name`

// claimDueSQL locks one due schedule of ours. SKIP LOCKED: a row another
// replica is firing right now is that replica's business.
const claimDueSQL = `
SELECT name, spec, timezone, kind, args, insert_opts, catch_up, catch_up_max, overlap, next_run_at, last_job_id
FROM /*schema*/tributary_schedule
WHERE name = ANY($1::text[]) AND NOT (name = ANY($2::text[])) AND NOT paused AND next_run_at <= $3
ORDER BY next_run_at
LIMIT 1
FOR UPDATE SKIP LOCKED`

const earliestSQL = `
SELECT min(next_run_at), clock_timestamp() FROM /*schema*/tributary_schedule
WHERE name = ANY($1::text[]) AND NOT paused`

const recordFireSQL = `
UPDATE /*schema*/tributary_schedule SET
    next_run_at   = $2,
    last_run_at   = COALESCE($3, last_run_at),
    last_job_id   = COALESCE($4, last_job_id),
    last_outcome  = $5,
    fired_count   = fired_count + $6,
    skipped_count = skipped_count + $7,
    updated_at    = $8
WHERE name = $1`

const listSchedulesSQL = `
SELECT s.name, s.spec, s.timezone, s.kind, s.args, s.insert_opts, s.catch_up, s.catch_up_max, s.overlap,
       s.next_run_at, s.last_run_at, s.last_job_id, s.last_outcome, s.fired_count,
       s.skipped_count, s.paused, s.declared_at, s.orphaned_at, s.updated_at
FROM /*schema*/tributary_schedule s
ORDER BY s.name`

const lockScheduleSQL = `
SELECT spec, timezone, kind, args, insert_opts, overlap, paused, last_job_id, orphaned_at
FROM /*schema*/tributary_schedule WHERE name = $1 FOR UPDATE`

const setPausedSQL = `
UPDATE /*schema*/tributary_schedule SET paused = $2, updated_at = $3 WHERE name = $1`

const resumeSQL = `
UPDATE /*schema*/tributary_schedule SET paused = false, next_run_at = $2, updated_at = $3 WHERE name = $1`

const recordTriggerSQL = `
UPDATE /*schema*/tributary_schedule SET
    last_run_at  = $2,
    last_job_id  = $3,
    last_outcome = 'triggered',
    fired_count  = fired_count + 1,
    updated_at   = $4
WHERE name = $1`
