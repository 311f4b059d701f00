-- Whole workflows' concurrency keys (workflow.Opts.ConcurrencyKey) are
-- limits (docs/decisions/0035-workflow-keys-on-limits.md): a key's limit
-- is the row 'workflow:' || key of tributary_limit, holder 'workflows',
-- whose declared_max the latest workflow inserted with the key declares
-- (its ConcurrencyLimit) and whose max_override `tributary limits set`
-- writes. Its slots are the key's admitted, unfinished workflows, counted
-- (status 'running' and not queued), as a job limit's are its jobs
-- holding one: tributary_workflow_concurrency's counter goes. The row's
-- lock orders the key's admissions, as the counter's row did: an insert,
-- the transaction that finishes or cancels a workflow of the key (workflow
-- rows first, then key rows in key order, then the queued workflows it
-- admits) and an admitter's pass after an override.
ALTER TABLE tributary_limit
    ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT 'jobs' CHECK (holder IN ('jobs', 'workflows'));

-- The keys of the counter table and of the running workflows become
-- limits, each with the ConcurrencyLimit of its latest workflow. Queued
-- workflows stay queued: the next workflow of their key to finish admits
-- them, or an admitter's pass if their key has room already.
INSERT INTO tributary_limit (name, kind, queue, key_arg, declared_max, total, rate, period_ms, on_busy, max_override, cursor_key, declared_at, updated_at, holder)
SELECT 'workflow:' || k.key, '', '', '', greatest(coalesce(
        (SELECT w.concurrency_limit FROM tributary_workflow w WHERE w.concurrency_key = k.key ORDER BY w.id DESC LIMIT 1), 1), 1),
    0, 0, 0, '', NULL, '', now(), now(), 'workflows'
FROM (
    SELECT key FROM tributary_workflow_concurrency
    UNION
    SELECT concurrency_key FROM tributary_workflow WHERE concurrency_key IS NOT NULL AND status = 'running'
) k
ON CONFLICT (name) DO NOTHING;

DROP TABLE IF EXISTS tributary_workflow_concurrency;

-- A key's use: its running workflows, admitted or queued.
CREATE INDEX IF NOT EXISTS tributary_workflow_key_running_idx ON tributary_workflow (concurrency_key, queued)
    WHERE concurrency_key IS NOT NULL AND status = 'running';

-- The use of the limits whose slots are not jobs, for `tributary limits
-- list`, the dashboard and the admitters' poll (package limits reads it;
-- the workflow package counts one key with its own statement): per limit,
-- the holders holding a slot, the ones waiting and the oldest waiting.
CREATE VIEW tributary_limit_holder_use AS
SELECT 'workflow:' || concurrency_key AS limit_name,
    (count(*) FILTER (WHERE NOT queued))::integer AS used,
    (count(*) FILTER (WHERE queued))::integer AS waiting,
    (array_agg(id::text ORDER BY id) FILTER (WHERE queued))[1] AS oldest_waiting_id,
    min(created_at) FILTER (WHERE queued) AS oldest_waiting_since
FROM tributary_workflow
WHERE concurrency_key IS NOT NULL AND status = 'running'
GROUP BY concurrency_key;
