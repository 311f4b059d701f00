-- Per-destination delivery of outbox rows, retry backoff, and the index that
-- lets the forwarder's claim step over an aggregate that cannot move.
--
-- delivered_to names the forwarder's destinations (publisher names) that
-- already have the row: the transactional ones (the in-database bus) are
-- added in the claim's transaction, the plain ones (an AMQP exchange) once
-- they confirmed it. A retry goes only to the destinations not listed, and a
-- row is SENT when every destination is. NULL: none yet (rows written before
-- this migration, and every row the emitter writes).
--
-- next_attempt_at is when a row whose last attempt failed may be tried again
-- (exponential backoff); NULL for rows that never failed or are claimed.
ALTER TABLE tributary_outbox
    ADD COLUMN delivered_to text[],
    ADD COLUMN next_attempt_at timestamptz;

-- The rows that hold their aggregate back: CLAIMED ones, and PENDING ones
-- that failed and wait for their next attempt. The claim looks up, for each
-- PENDING row it considers, whether an earlier row of its aggregate is here;
-- the index holds only those few rows, however long the backlog behind them.
CREATE INDEX tributary_outbox_blocking_idx ON tributary_outbox (aggregate_id, position)
    WHERE aggregate_id IS NOT NULL AND (status = 'CLAIMED' OR (status = 'PENDING' AND next_attempt_at IS NOT NULL));
