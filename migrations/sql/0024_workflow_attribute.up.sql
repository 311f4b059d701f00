-- Workflow attributes (jobs/workflow/attributes.go): key/value strings set
-- at insert (Opts.Attributes) or by a task (SetAttributes), to find
-- workflows by customer, order or tenant
-- (docs/decisions/0041-workflow-attributes-side-table.md).
--
-- A side table rather than a jsonb column with a GIN index. Measured on
-- 1,000,000 workflows with three attributes each (EXPLAIN ANALYZE, newest
-- 51 matches): the btree on (key, value, workflow_id) is read backwards and
-- stops after the page whatever the value's frequency (0.1 to 0.8 ms for
-- 10, 1,000, 250,000 and 20,000-oldest matches); the GIN index cannot give
-- id order, and its containment estimate is a constant, so the planner
-- walked the primary key filtering rows for a value held by the 20,000
-- oldest workflows (686 ms), and sorted a bitmap of 1,000 matches (18 ms).
-- Setting an attribute writes this table only, never the workflow's row,
-- which completions lock and update. The cost is size: 455 MB against a
-- 22 MB GIN index for the 3,000,000 attributes.
CREATE TABLE IF NOT EXISTS tributary_workflow_attribute (
    workflow_id uuid NOT NULL REFERENCES tributary_workflow (id) ON DELETE CASCADE,
    key         text NOT NULL,
    value       text NOT NULL,
    PRIMARY KEY (workflow_id, key)
);
CREATE INDEX IF NOT EXISTS tributary_workflow_attribute_kv_idx ON tributary_workflow_attribute (key, value, workflow_id);
