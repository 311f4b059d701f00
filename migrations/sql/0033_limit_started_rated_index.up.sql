-- The index of starts (migration 0027) counts a rate limit's starts within
-- its period; it held every limited job that ever started, and took an
-- entry at the start and another at the completion of each, rate or not
-- (6-8 µs of Postgres CPU per job of a limit without a rate in
-- `bench limits`, measured by dropping it; decision 0031). It now holds the jobs that carry a
-- weight: the insert middleware writes one for every job of a limit with
-- a rate, 1 included. The jobs of rate limits inserted before are given
-- theirs: those not finished, and those that started within their
-- limit's period.
UPDATE river_job j
SET metadata = j.metadata || '{"tributary_limit_weight": 1}'
FROM tributary_limit l
WHERE (j.metadata ? 'tributary_limit' OR j.metadata ? 'tributary_limit_on_release')
  AND NOT j.metadata ? 'tributary_limit_weight'
  AND l.name = coalesce(j.metadata ->> 'tributary_limit', j.metadata ->> 'tributary_limit_on_release')
  AND l.rate > 0
  AND (j.state IN ('pending', 'available', 'running', 'retryable', 'scheduled')
       OR j.attempted_at > now() - l.period_ms * interval '1 millisecond');

DROP INDEX tributary_river_job_limit_started_index;
CREATE INDEX tributary_river_job_limit_started_index ON river_job
    ((metadata ->> 'tributary_limit'), attempted_at)
    WHERE metadata ? 'tributary_limit_weight' AND attempted_at IS NOT NULL;
