-- Flow control (package limits; docs/decisions/0030-flow-control.md). A
-- limited job carries its limit's name (tributary_limit) and partition
-- value (tributary_limit_key) in River's metadata and waits in River's
-- pending state until an admitter moves it to available; its slot is its
-- state, so nothing here counts running jobs.
--
-- One row per declared limit: what the code declared (declared_max: 0
-- for no per-key cap; total: the cap over all keys, served round-robin,
-- 0 for none; rate: starts per period_ms, 0 for none; on_busy: the
-- busy-key strategy, '' to queue), the run-time
-- override (`tributary limits set`; NULL: none), and the round-robin
-- cursor of the admitter. The admitter locks the row (FOR UPDATE) for one
-- pass, which makes admission of one limit serial across processes.
CREATE TABLE tributary_limit (
    name         text        PRIMARY KEY,
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    key_arg      text        NOT NULL,
    declared_max integer     NOT NULL CHECK (declared_max >= 0),
    total        integer     NOT NULL CHECK (total >= 0),
    rate         integer     NOT NULL CHECK (rate >= 0),
    on_busy      text        NOT NULL,
    period_ms    bigint      NOT NULL CHECK (period_ms >= 0),
    max_override integer     CHECK (max_override >= 0),
    cursor_key   text        NOT NULL,
    declared_at  timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- The admitter's counts: per limit and key, the jobs in the three states
-- that matter. Unlimited jobs have no entry. Updates of river_job.state are
-- never HOT anyway (River's fetch index holds state), so this index costs
-- only the limited jobs' own updates.
CREATE INDEX tributary_river_job_limit_index ON river_job
    ((metadata ->> 'tributary_limit'), (metadata ->> 'tributary_limit_key'), state, priority, scheduled_at, id)
    WHERE metadata ? 'tributary_limit' AND state IN ('pending', 'available', 'running');

-- A rate limit's counts: the starts of its jobs within the period, by the
-- start of their latest attempt (River's attempted_at, set by the fetch on
-- the database clock); earlier attempts are counted from their errors.
CREATE INDEX tributary_river_job_limit_started_index ON river_job
    ((metadata ->> 'tributary_limit'), attempted_at)
    WHERE metadata ? 'tributary_limit' AND attempted_at IS NOT NULL;

-- The door: a limited job enters available only by admission (the
-- admitter sets tributary.admitting for its transaction) or straight back
-- from running (it held its slot: the liveness rescue, a snooze of zero).
-- A retry or a snooze coming due, or JobRetry of a finished job, would
-- make it available behind the limit's back: it goes to pending instead
-- and waits for admission with the others.
-- The setting is tested in the WHEN clause, so the admitter's own updates
-- call no function at all.
CREATE FUNCTION tributary_limit_door() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.state := 'pending';
    RETURN NEW;
END
$$;

CREATE TRIGGER tributary_limit_door BEFORE UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND OLD.state NOT IN ('available', 'running') AND NEW.metadata ? 'tributary_limit'
          AND current_setting('tributary.admitting', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION tributary_limit_door();

-- Wakes the admitters (channel "<schema>.tributary_limit", payload: the
-- limit) when a limited job gives its slot back or starts waiting.
CREATE FUNCTION tributary_limit_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.tributary_limit', NEW.metadata ->> 'tributary_limit');
    RETURN NULL;
END
$$;

CREATE TRIGGER tributary_limit_waiting AFTER INSERT ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NEW.metadata ? 'tributary_limit')
    EXECUTE FUNCTION tributary_limit_notify();

CREATE TRIGGER tributary_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.metadata ? 'tributary_limit' AND (
        (OLD.state IN ('available', 'running') AND NEW.state NOT IN ('available', 'running'))
        OR (NEW.state = 'pending' AND OLD.state <> 'pending')))
    EXECUTE FUNCTION tributary_limit_notify();
