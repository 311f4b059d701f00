DROP INDEX IF EXISTS river_job_tributary_schedule_fire;
DROP TABLE IF EXISTS tributary_schedule;
