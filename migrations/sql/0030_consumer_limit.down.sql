-- Consumers are not capped: their dispatch jobs are inserted as before
-- migration 0030 (the marks already written stay and are admitted).
ALTER TABLE tributary_event_consumer DROP COLUMN IF EXISTS limit_name;
