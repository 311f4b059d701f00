-- The weights written for 1 stay: they read as the default.
DROP INDEX tributary_river_job_limit_started_index;
CREATE INDEX tributary_river_job_limit_started_index ON river_job
    ((metadata ->> 'tributary_limit'), attempted_at)
    WHERE metadata ? 'tributary_limit' AND attempted_at IS NOT NULL;
