-- Lane events' args as text.
--
-- The bus writes a lane event's args once and the chain that runs the event
-- reads them back once; nothing queries inside them, and no index covers
-- them. As jsonb, Postgres parsed every lane event's args on the way in
-- and printed them again on the way out. A lane event's args become JSON
-- again (jsonb) only when the event moves into river_job as a dispatch job
-- (docs/BENCHMARKS.md, "The twelfth round").
ALTER TABLE tributary_event_lane_event ALTER COLUMN args TYPE text USING args::text;
