-- Limited jobs still pending stay pending with nobody to admit them:
-- drain them (or make them available by hand) before rolling back.
DROP TRIGGER IF EXISTS tributary_limit_freed ON river_job;
DROP TRIGGER IF EXISTS tributary_limit_waiting ON river_job;
DROP TRIGGER IF EXISTS tributary_limit_door ON river_job;
DROP FUNCTION IF EXISTS tributary_limit_notify();
DROP FUNCTION IF EXISTS tributary_limit_door();
DROP INDEX IF EXISTS tributary_river_job_limit_started_index;
DROP INDEX IF EXISTS tributary_river_job_limit_index;
DROP TABLE IF EXISTS tributary_limit;
