DROP TABLE IF EXISTS tributary_workflow_concurrency;
DROP INDEX IF EXISTS tributary_workflow_queued_idx;
DROP INDEX IF EXISTS tributary_workflow_parent_idx;
ALTER TABLE tributary_workflow
    DROP COLUMN IF EXISTS queued,
    DROP COLUMN IF EXISTS concurrency_limit,
    DROP COLUMN IF EXISTS concurrency_key,
    DROP COLUMN IF EXISTS parent_task,
    DROP COLUMN IF EXISTS parent_workflow_id;
DROP TABLE IF EXISTS tributary_workflow_signal;
DROP TABLE IF EXISTS tributary_workflow_step;
