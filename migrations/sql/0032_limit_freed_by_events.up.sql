-- A limited job's completion by its worker (running to completed) no
-- longer sends the admitters a notification: the worker process's own
-- admitter learns of it from River's completion events, after the
-- completion is committed (package limits, Admitter; decision 0031). The
-- trigger ran a function for every completed limited job in River's
-- completion batch; every other way out of a slot (an error, a snooze, a
-- cancellation, a discard) and every job that starts waiting still sends
-- one.
DROP TRIGGER tributary_limit_freed ON river_job;
CREATE TRIGGER tributary_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.metadata ? 'tributary_limit' AND (
        (OLD.state IN ('available', 'running') AND NEW.state NOT IN ('available', 'running')
         AND NOT (OLD.state = 'running' AND NEW.state = 'completed'))
        OR (NEW.state = 'pending' AND (OLD.state <> 'pending' OR NOT OLD.metadata ? 'tributary_limit'))))
    EXECUTE FUNCTION tributary_limit_notify();
