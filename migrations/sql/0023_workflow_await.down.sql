DROP TRIGGER IF EXISTS tributary_workflow_notify_end ON tributary_workflow;
DROP FUNCTION IF EXISTS tributary_workflow_notify_end();
ALTER TABLE tributary_workflow DROP COLUMN IF EXISTS awaited;
