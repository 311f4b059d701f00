ALTER TABLE tributary_event_consumer DROP COLUMN IF EXISTS dispatch_batch;
