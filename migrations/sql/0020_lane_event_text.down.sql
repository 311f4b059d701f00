ALTER TABLE tributary_event_lane_event ALTER COLUMN args TYPE jsonb USING args::jsonb;
