DROP INDEX IF EXISTS tributary_outbox_blocking_idx;
ALTER TABLE tributary_outbox DROP COLUMN IF EXISTS next_attempt_at, DROP COLUMN IF EXISTS delivered_to;
