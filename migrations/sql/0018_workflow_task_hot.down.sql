CREATE INDEX IF NOT EXISTS tributary_workflow_task_active_idx ON tributary_workflow_task (updated_at, workflow_id, name) WHERE state = 'active';
CREATE INDEX IF NOT EXISTS tributary_workflow_task_undecided_idx ON tributary_workflow_task (updated_at) WHERE state = 'pending' AND pending_deps = 0;
ALTER TABLE tributary_workflow_task SET (fillfactor = 70);
