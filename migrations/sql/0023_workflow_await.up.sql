-- Await (jobs/workflow/await.go): a NOTIFY when an awaited workflow ends
-- (docs/decisions/0040-await-notify-in-the-ending-transaction.md).
--
-- A waiter sets awaited on the running row (an UPDATE, so it serialises
-- with the transaction that ends the workflow: either that transaction sees
-- the flag and notifies, or the waiter's update sees the ended row). Only
-- awaited workflows notify: a NOTIFY serialises the commits of every
-- notifying transaction in the cluster, a cost the completions of workflows
-- nobody waits for need not pay. awaited is in no index, so setting it
-- keeps the update HOT.
ALTER TABLE tributary_workflow ADD COLUMN IF NOT EXISTS awaited boolean NOT NULL DEFAULT false;

-- The channel is shared by every schema of the database; the payload names
-- the schema and the workflow.
CREATE OR REPLACE FUNCTION tributary_workflow_notify_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tributary_workflow_end', TG_TABLE_SCHEMA || ' ' || NEW.id::text);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS tributary_workflow_notify_end ON tributary_workflow;
CREATE TRIGGER tributary_workflow_notify_end AFTER UPDATE OF status ON tributary_workflow
    FOR EACH ROW WHEN (NEW.awaited AND OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION tributary_workflow_notify_end();
