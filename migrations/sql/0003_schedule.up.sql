-- Durable cron state, one row per schedule declared in code. The scheduler
-- service of every replica upserts its declarations at start and fires a due
-- schedule inside a transaction that holds the row lock (FOR UPDATE SKIP
-- LOCKED), inserts the job and advances next_run_at, so one fire time inserts
-- one job however many replicas run.
CREATE TABLE tributary_schedule (
    name          text        PRIMARY KEY,
    spec          text        NOT NULL,          -- cron expression without CRON_TZ= prefix
    timezone      text        NOT NULL,          -- IANA zone the spec is evaluated in
    kind          text        NOT NULL,          -- job kind inserted on each fire
    args          jsonb       NOT NULL,          -- job args
    insert_opts   jsonb       NOT NULL,          -- queue, priority, max_attempts, tags
    catch_up      text        NOT NULL CHECK (catch_up IN ('skip', 'once', 'each')),
    catch_up_max  integer     NOT NULL CHECK (catch_up_max >= 1),
    overlap       text        NOT NULL CHECK (overlap IN ('allow', 'skip')),
    next_run_at   timestamptz NOT NULL,          -- next fire time not yet handled
    last_run_at   timestamptz,                   -- fire time of the last inserted job
    last_job_id   bigint,                        -- river_job.id of that job
    last_outcome  text,                          -- inserted, skipped_overlap, skipped_catch_up, triggered
    fired_count   bigint      NOT NULL,          -- jobs inserted by fires and triggers
    skipped_count bigint      NOT NULL,          -- fire times dropped (catch-up or overlap)
    paused        boolean     NOT NULL,
    declared_at   timestamptz NOT NULL,          -- last time a scheduler declared it in code
    orphaned_at   timestamptz,                   -- set when a scheduler started without declaring it
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- The scheduler's wake-up query: the earliest due, unpaused schedule.
CREATE INDEX tributary_schedule_next_run_at ON tributary_schedule (next_run_at) WHERE NOT paused;

-- One job per (schedule, fire time), enforced by the database. Every job a
-- schedule inserts carries both values in its metadata; the row lock already
-- prevents a second fire, this catches what the lock cannot (a restored
-- backup, a hand-edited next_run_at). Other jobs are not indexed.
CREATE UNIQUE INDEX river_job_tributary_schedule_fire
    ON river_job ((metadata ->> 'tributary_schedule'), (metadata ->> 'tributary_fire_at'))
    WHERE metadata ? 'tributary_fire_at';
