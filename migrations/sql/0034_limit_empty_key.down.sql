-- Jobs inserted without the key would be counted under no key: give them
-- the empty one first.
UPDATE river_job SET metadata = metadata || '{"tributary_limit_key": ""}'
WHERE (metadata ? 'tributary_limit' OR metadata ? 'tributary_limit_on_release') AND NOT metadata ? 'tributary_limit_key';
DROP INDEX tributary_river_job_limit_index;
CREATE INDEX tributary_river_job_limit_index ON river_job
    ((metadata ->> 'tributary_limit'), (metadata ->> 'tributary_limit_key'), state, priority, scheduled_at, id)
    WHERE metadata ? 'tributary_limit' AND state IN ('pending', 'available', 'running');
