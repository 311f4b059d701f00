-- Lane events' args as text.
--
-- The bus writes a lane event's args once and the chain that runs the event
-- reads them back once; nothing queries inside them, and no index covers
-- them. As jsonb, Postgres parsed every lane event's args on the way in
-- and printed them again on the way out. A lane event's args become JSON
-- again (jsonb) only when the event moves into river_job as a dispatch job
-- (docs/BENCHMARKS.md, "The twelfth round").
ALTER TABLE tributary_event_lane_event ALTER COLUMN args TYPE text USING args::text;

-- With the event no longer escaped into a string (the events package
-- writes it as an object since), a lane event is smaller and more of them
-- share a page; a claim writes claimed_by and claimed_at into each, a
-- new version larger than the old, and at fillfactor 50 the last ones of
-- a page no longer found room for it there (178 of 200 claims HOT in
-- TestLaneEventClaimsStayOnTheirPage). 40 leaves room for every claim of
-- a full page (0019 explains why the claims must stay on their page).
ALTER TABLE tributary_event_lane_event SET (fillfactor = 40);
