ALTER TABLE tributary_workflow DROP COLUMN IF EXISTS forked_from_task;
ALTER TABLE tributary_workflow DROP COLUMN IF EXISTS forked_from;
