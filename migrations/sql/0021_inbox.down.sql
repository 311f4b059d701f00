-- Batches still waiting are lost with the table: let the inboxes' batch
-- jobs drain before rolling back.
DROP TABLE IF EXISTS tributary_inbox_batch;
