DROP TABLE IF EXISTS tributary_workflow_attribute;
