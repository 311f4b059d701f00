-- Migration 0027's door and notification. Jobs still marked
-- tributary_limit_on_release are released unlimited.
CREATE OR REPLACE FUNCTION tributary_limit_door() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.state := 'pending';
    RETURN NEW;
END
$$;

DROP TRIGGER tributary_limit_door ON river_job;
CREATE TRIGGER tributary_limit_door BEFORE UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND OLD.state NOT IN ('available', 'running') AND NEW.metadata ? 'tributary_limit'
          AND current_setting('tributary.admitting', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION tributary_limit_door();

DROP TRIGGER tributary_limit_freed ON river_job;
CREATE TRIGGER tributary_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.metadata ? 'tributary_limit' AND (
        (OLD.state IN ('available', 'running') AND NEW.state NOT IN ('available', 'running'))
        OR (NEW.state = 'pending' AND OLD.state <> 'pending')))
    EXECUTE FUNCTION tributary_limit_notify();
