-- Limits for jobs their inserter makes pending itself (a workflow task
-- waiting for its dependencies; package limits, docs/limits.md). Such a
-- job must not be admitted before its inserter releases it, so the insert
-- middleware writes its limit as tributary_limit_on_release, which the
-- admitter's counts and indexes do not see; the key and weight are written
-- as for any limited job.
--
-- The door (migration 0027) now also stops such a job on its release into
-- available, whoever releases it (the workflow's promotion, River's
-- scheduler for a task released with a ScheduledAt ahead, JobRetry): it
-- renames the mark to tributary_limit and sends the job to pending, where
-- it waits for admission like any other limited job.
CREATE OR REPLACE FUNCTION tributary_limit_door() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.metadata ? 'tributary_limit_on_release' THEN
        NEW.metadata := (NEW.metadata - 'tributary_limit_on_release')
            || jsonb_build_object('tributary_limit', NEW.metadata -> 'tributary_limit_on_release');
    END IF;
    NEW.state := 'pending';
    RETURN NEW;
END
$$;

DROP TRIGGER tributary_limit_door ON river_job;
CREATE TRIGGER tributary_limit_door BEFORE UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND OLD.state NOT IN ('available', 'running')
          AND (NEW.metadata ? 'tributary_limit' OR NEW.metadata ? 'tributary_limit_on_release')
          AND current_setting('tributary.admitting', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION tributary_limit_door();

-- A job stopped at its release stays pending (pending to pending), so the
-- notification that it starts waiting also fires when a pending job gains
-- its limit.
DROP TRIGGER tributary_limit_freed ON river_job;
CREATE TRIGGER tributary_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.metadata ? 'tributary_limit' AND (
        (OLD.state IN ('available', 'running') AND NEW.state NOT IN ('available', 'running'))
        OR (NEW.state = 'pending' AND (OLD.state <> 'pending' OR NOT OLD.metadata ? 'tributary_limit'))))
    EXECUTE FUNCTION tributary_limit_notify();
