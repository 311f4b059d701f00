ALTER TABLE tributary_workflow_task RESET (fillfactor);
ALTER TABLE tributary_workflow RESET (fillfactor);
