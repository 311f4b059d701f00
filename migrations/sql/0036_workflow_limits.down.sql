-- The workflow keys' limits go back to their counter table, counted from
-- the admitted running workflows; their overrides are lost.
DROP VIEW IF EXISTS tributary_limit_holder_use;
DROP INDEX IF EXISTS tributary_workflow_key_running_idx;
CREATE TABLE IF NOT EXISTS tributary_workflow_concurrency (
    key     text    PRIMARY KEY,
    running integer NOT NULL CHECK (running >= 0)
);
INSERT INTO tributary_workflow_concurrency (key, running)
SELECT substr(l.name, length('workflow:') + 1),
    (SELECT count(*) FROM tributary_workflow w WHERE w.concurrency_key = substr(l.name, length('workflow:') + 1) AND w.status = 'running' AND NOT w.queued)
FROM tributary_limit l WHERE l.holder = 'workflows'
ON CONFLICT (key) DO NOTHING;
DELETE FROM tributary_limit WHERE holder = 'workflows';
ALTER TABLE tributary_limit DROP COLUMN IF EXISTS holder;
