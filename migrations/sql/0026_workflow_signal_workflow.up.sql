-- Deleting a workflow (retention, its archive) deletes its signals through
-- the foreign key, one lookup per workflow; without an index on
-- workflow_id that finds consumed signals, each lookup read the whole
-- signal table (a batch of 1,000 workflows with 10,000 signals stored hit
-- the clean-up's statement timeout).
CREATE INDEX IF NOT EXISTS tributary_workflow_signal_workflow_idx ON tributary_workflow_signal (workflow_id);
