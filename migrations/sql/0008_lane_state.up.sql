-- Explicit lane state and consumer liveness (lane repair, blocked lanes,
-- consumers nobody runs).

-- A lane blocked by a dispatch given up under OrderingBlock says so: which
-- job, why, since when, and a copy of the job's args, so that a retry can
-- put the event back even after River's retention deleted the job.
ALTER TABLE tributary_event_lane
    DROP COLUMN IF EXISTS blocked_job_id,
    DROP COLUMN IF EXISTS blocked_reason,
    DROP COLUMN IF EXISTS blocked_since,
    DROP COLUMN IF EXISTS blocked_args;
ALTER TABLE tributary_event_lane
    ADD COLUMN blocked_job_id bigint,
    ADD COLUMN blocked_reason text,
    ADD COLUMN blocked_since  timestamptz,
    ADD COLUMN blocked_args   jsonb;
CREATE INDEX IF NOT EXISTS tributary_event_lane_blocked_idx ON tributary_event_lane (consumer, aggregate_id)
    WHERE blocked_job_id IS NOT NULL;
-- The repair sweep walks the lanes with work behind their head, oldest
-- first; idle lanes (head past last) are most lanes and never need it.
CREATE INDEX IF NOT EXISTS tributary_event_lane_waiting_idx ON tributary_event_lane (updated_at, consumer, aggregate_id)
    WHERE head_seq <= last_seq;

-- A consumer's failure policy (the repair sweep applies it to lanes of
-- consumers it does not run), when a live worker last ran it, and how long
-- it keeps receiving new events while no worker runs it (-1: for ever).
ALTER TABLE tributary_event_consumer
    DROP COLUMN IF EXISTS ordering,
    DROP COLUMN IF EXISTS seen_at,
    DROP COLUMN IF EXISTS inactive_after_ms;
ALTER TABLE tributary_event_consumer
    ADD COLUMN ordering text NOT NULL DEFAULT 'block' CHECK (ordering IN ('block', 'skip')),
    ADD COLUMN seen_at timestamptz,
    ADD COLUMN inactive_after_ms bigint NOT NULL DEFAULT 259200000;
UPDATE tributary_event_consumer SET seen_at = updated_at;
ALTER TABLE tributary_event_consumer ALTER COLUMN seen_at SET NOT NULL;

-- Dispatch jobs by lane key in every state, replacing the index of pending
-- ones only: the repair sweep, retry and the dispatcher's guard look up a
-- lane's head whatever its state (discarded, cancelled, deleted), and the
-- promotion of the next pending job probes the same key.
DROP INDEX IF EXISTS tributary_dispatch_pending_idx;
CREATE INDEX IF NOT EXISTS tributary_dispatch_lane_idx ON river_job
    ((args ->> 'consumer'), (args ->> 'aggregate_id'), ((args ->> 'seq')::bigint))
    WHERE kind = 'tributary.event.dispatch' AND (args ->> 'aggregate_id') IS NOT NULL;
