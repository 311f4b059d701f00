-- Fork (jobs/workflow/fork.go): the workflow and task a forked workflow
-- started from. No foreign key: retention may delete the original first.
ALTER TABLE tributary_workflow ADD COLUMN IF NOT EXISTS forked_from uuid;
ALTER TABLE tributary_workflow ADD COLUMN IF NOT EXISTS forked_from_task text;
