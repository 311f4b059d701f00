DROP INDEX IF EXISTS tributary_dispatch_pending_idx;
DROP TABLE IF EXISTS tributary_event_lane;
DROP TABLE IF EXISTS tributary_event_consumer;
DROP TABLE IF EXISTS tributary_outbox;
