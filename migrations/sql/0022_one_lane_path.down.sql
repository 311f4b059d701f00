-- Lane events stay: every version since 0016 promotes and runs them.
ALTER TABLE tributary_event_consumer ALTER COLUMN lane_events SET DEFAULT false;
