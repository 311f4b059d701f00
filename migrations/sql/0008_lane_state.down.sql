DROP INDEX IF EXISTS tributary_dispatch_lane_idx;
CREATE INDEX IF NOT EXISTS tributary_dispatch_pending_idx ON river_job
    ((args ->> 'consumer'), (args ->> 'aggregate_id'), ((args ->> 'seq')::bigint))
    WHERE state = 'pending' AND kind = 'tributary.event.dispatch';
ALTER TABLE tributary_event_consumer
    DROP COLUMN IF EXISTS ordering,
    DROP COLUMN IF EXISTS seen_at,
    DROP COLUMN IF EXISTS inactive_after_ms;
DROP INDEX IF EXISTS tributary_event_lane_waiting_idx;
DROP INDEX IF EXISTS tributary_event_lane_blocked_idx;
ALTER TABLE tributary_event_lane
    DROP COLUMN IF EXISTS blocked_job_id,
    DROP COLUMN IF EXISTS blocked_reason,
    DROP COLUMN IF EXISTS blocked_since,
    DROP COLUMN IF EXISTS blocked_args;
