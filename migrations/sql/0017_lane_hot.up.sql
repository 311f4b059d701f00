-- Lane row updates that stay on their page (HOT: no new index entries).
--
-- Every forwarded ordered event updates its lane's row twice: the bus's
-- reservation (last_seq) and the step that records it (head_seq). Both
-- were non-HOT: the repair sweep's index names head_seq and last_seq in
-- its predicate and updated_at as its key, and the clean-up's index is on
-- updated_at, so each update wrote a new version with an entry in every
-- index of the table, and with autovacuum behind the primary key's entries
-- piled up (14-15 blocks read per lane per update in bench events).
--
-- waiting (head_seq <= last_seq: work at or behind the head) is computed by
-- Postgres and changes only when a lane turns busy or idle, so the sweep's
-- index predicate names it instead; updated_at is written by the hot paths
-- at most every few seconds (docs/ARCHITECTURE.md, "Lane rows"; laneTouchEvery in jobs/events/lanes.go), and an
-- update that leaves both as they were is HOT when its page has room.
ALTER TABLE tributary_event_lane DROP COLUMN IF EXISTS waiting;
ALTER TABLE tributary_event_lane ADD COLUMN waiting boolean GENERATED ALWAYS AS (head_seq <= last_seq) STORED;
DROP INDEX IF EXISTS tributary_event_lane_waiting_idx;
CREATE INDEX tributary_event_lane_waiting_idx ON tributary_event_lane (updated_at, consumer, aggregate_id)
    WHERE waiting;
ALTER TABLE tributary_event_lane SET (fillfactor = 50);
