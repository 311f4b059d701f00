DROP TRIGGER tributary_limit_freed ON river_job;
CREATE TRIGGER tributary_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.metadata ? 'tributary_limit' AND (
        (OLD.state IN ('available', 'running') AND NEW.state NOT IN ('available', 'running'))
        OR (NEW.state = 'pending' AND (OLD.state <> 'pending' OR NOT OLD.metadata ? 'tributary_limit'))))
    EXECUTE FUNCTION tributary_limit_notify();
