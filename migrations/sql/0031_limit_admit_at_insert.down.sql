-- Limited jobs inserted available by a newer middleware would pass
-- unchecked without this trigger: roll back the code first.
DROP TRIGGER IF EXISTS tributary_limit_admit_insert ON river_job;
DROP FUNCTION IF EXISTS tributary_limit_admit_insert();
