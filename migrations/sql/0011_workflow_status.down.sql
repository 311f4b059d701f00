DROP INDEX IF EXISTS tributary_workflow_status_idx;
