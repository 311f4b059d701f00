-- A job of a rate limit that leaves running straight for available (the
-- liveness rescue of a dead process's job; a retry or a snooze due within
-- River's scheduler interval) would start again without admission,
-- outside the rate's budget: with worker processes SIGKILLed, a one-second
-- window held 92 starts under a rate of 50 (TestChaosLimitsSIGKILL). It goes
-- to pending instead and waits for admission, which still counts its
-- earlier start. A job of a limit without a rate goes straight back as
-- before: it held its slot and keeps it.
--
-- A trigger of its own beside migration 0027's door, which handles every
-- other way into available: their conditions do not overlap, so either
-- can change without the other. The limit's row says whether it has a
-- rate (the declaration in force); it is read in the table's schema, as
-- the updating session's search_path is its own.
CREATE FUNCTION tributary_limit_rate_door() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rated boolean;
BEGIN
    EXECUTE format('SELECT rate > 0 FROM %I.tributary_limit WHERE name = $1', TG_TABLE_SCHEMA)
        INTO rated USING NEW.metadata ->> 'tributary_limit';
    IF rated THEN
        NEW.state := 'pending';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER tributary_limit_rate_door BEFORE UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND OLD.state = 'running' AND NEW.metadata ? 'tributary_limit')
    EXECUTE FUNCTION tributary_limit_rate_door();
