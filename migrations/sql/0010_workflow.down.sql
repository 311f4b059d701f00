DROP TABLE IF EXISTS tributary_workflow_task;
DROP TABLE IF EXISTS tributary_workflow;
