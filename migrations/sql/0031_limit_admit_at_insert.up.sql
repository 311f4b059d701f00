-- Admission at insert (docs/decisions/0031-admission-at-insert.md): the
-- limits' insert middleware writes a job of a declared limit into
-- available with the mark tributary_limit_admit, and this trigger takes
-- the mark off and keeps the job available only while its key has room,
-- as an admitter's pass would decide; otherwise it goes to pending and
-- waits for the admitter like any limited job. It saves the admission's
-- second write of the row and the admitter's pass. A job inserted without
-- the mark is left as its inserter wrote it.
--
-- Exact like a pass: the first job of a limit and key in a transaction
-- locks the limit's row (as a pass does, to the commit), counts the key's
-- jobs holding a slot and caches the room left for the rest of the
-- transaction (nobody else admits into the limit while the row is locked,
-- and slots given back only add room). It takes the lock only if it is
-- free (SKIP LOCKED): an inserter never waits for a pass or another
-- inserter, its job waits for the admitter instead. Only in READ COMMITTED,
-- where the count after the lock sees every admission committed before;
-- only for limits with neither a rate nor a Total (round-robin), whose
-- admission stays the admitter's; and never past jobs of the key already
-- waiting, which go first. River inserts a job available only when it is
-- due (scheduled_at is the inserting client's clock, which may run ahead
-- of the transaction's now() by the time of the insert); a job scheduled
-- ahead is inserted scheduled and made pending by the middleware.
CREATE FUNCTION tributary_limit_admit_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lim     text := NEW.metadata ->> 'tributary_limit';
    k       text := coalesce(NEW.metadata ->> 'tributary_limit_key', '');
    slot    text;
    rooms   jsonb;
    room    integer;
    per_key integer;
    used    integer;
    waiting boolean;
    total   integer;
    rate    integer;
    def     jsonb;
BEGIN
    NEW.metadata := NEW.metadata - 'tributary_limit_admit';
    IF lim IS NULL OR current_setting('transaction_isolation') <> 'read committed' THEN
        NEW.state := 'pending';
        RETURN NEW;
    END IF;
    slot := lim || E'\n' || k;
    rooms := coalesce(nullif(current_setting('tributary.insert_rooms', true), ''), '{}')::jsonb;
    room := (rooms ->> slot)::integer;
    IF room IS NULL THEN
        room := 0;
        -- The row as JSON: the columns of later migrations (overrides of
        -- the Total and the rate, 0035; the holder of a limit's slots,
        -- 0036: only a limit of jobs admits at insert) are read when they
        -- are there.
        EXECUTE format('SELECT to_jsonb(l) FROM %I.tributary_limit l WHERE name = $1 FOR UPDATE SKIP LOCKED', TG_TABLE_SCHEMA)
            INTO def USING lim;
        per_key := coalesce(def ->> 'max_override', def ->> 'declared_max')::integer;
        total := coalesce(def ->> 'total_override', def ->> 'total')::integer;
        rate := coalesce(def ->> 'rate_override', def ->> 'rate')::integer;
        IF per_key IS NOT NULL AND total = 0 AND rate = 0 AND coalesce(def ->> 'holder', 'jobs') = 'jobs' THEN
            EXECUTE format($q$SELECT EXISTS (SELECT 1 FROM %I.river_job
                WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1 AND coalesce(metadata ->> 'tributary_limit_key', '') = $2
                  AND state = 'pending' AND scheduled_at <= now())$q$, TG_TABLE_SCHEMA)
                INTO waiting USING lim, k;
            IF NOT waiting THEN
                EXECUTE format($q$SELECT count(*)::int FROM (SELECT 1 FROM %I.river_job
                    WHERE metadata ? 'tributary_limit' AND metadata ->> 'tributary_limit' = $1 AND coalesce(metadata ->> 'tributary_limit_key', '') = $2
                      AND state IN ('available', 'running') LIMIT $3) s$q$, TG_TABLE_SCHEMA)
                    INTO used USING lim, k, per_key;
                room := per_key - used;
            END IF;
        END IF;
    END IF;
    IF room > 0 THEN
        room := room - 1;
    ELSE
        NEW.state := 'pending';
    END IF;
    PERFORM set_config('tributary.insert_rooms', jsonb_set(rooms, ARRAY[slot], to_jsonb(room))::text, true);
    RETURN NEW;
END
$$;

CREATE TRIGGER tributary_limit_admit_insert BEFORE INSERT ON river_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND NEW.metadata ? 'tributary_limit_admit')
    EXECUTE FUNCTION tributary_limit_admit_insert();
