DROP INDEX IF EXISTS tributary_event_lane_waiting_idx;
ALTER TABLE tributary_event_lane DROP COLUMN IF EXISTS waiting;
CREATE INDEX IF NOT EXISTS tributary_event_lane_waiting_idx ON tributary_event_lane (updated_at, consumer, aggregate_id)
    WHERE head_seq <= last_seq;
ALTER TABLE tributary_event_lane RESET (fillfactor);
