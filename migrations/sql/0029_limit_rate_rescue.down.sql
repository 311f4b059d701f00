-- Jobs of rate limits taken back from running go straight to available
-- again, as migration 0027 left them.
DROP TRIGGER IF EXISTS tributary_limit_rate_door ON river_job;
DROP FUNCTION IF EXISTS tributary_limit_rate_door();
