-- The most events without an aggregate one dispatch job of the consumer
-- carries (ConsumerConfig.DispatchBatch); 1 is one job per event.
ALTER TABLE tributary_event_consumer
    ADD COLUMN dispatch_batch integer NOT NULL DEFAULT 1 CHECK (dispatch_batch >= 1);
