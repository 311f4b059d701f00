ALTER TABLE tributary_event_lane_event SET (fillfactor = 50);
ALTER TABLE tributary_event_lane_event ALTER COLUMN args TYPE jsonb USING args::jsonb;
