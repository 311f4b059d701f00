-- Lane events still waiting are lost with the table: drain the lanes (or
-- turn LaneChain off and let them run) before rolling back.
ALTER TABLE tributary_event_consumer DROP COLUMN IF EXISTS lane_events;
DROP TABLE IF EXISTS tributary_event_lane_event;
