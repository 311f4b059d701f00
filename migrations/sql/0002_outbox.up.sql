-- The transactional outbox and the in-database event bus.
--
-- tributary_outbox holds events written in the application's transaction.
-- position is the emit order (an identity column: the one value the database
-- assigns, because only the database can hand out a sequence that is
-- monotonic across processes). Everything else is written by the code.
CREATE TABLE tributary_outbox (
    id             uuid        PRIMARY KEY,
    position       bigint      GENERATED ALWAYS AS IDENTITY,
    event_type     text        NOT NULL,
    event_version  integer     NOT NULL,
    event_kind     text        NOT NULL CHECK (event_kind IN ('domain', 'integration')),
    aggregate_id   text,
    payload        jsonb       NOT NULL,
    metadata       jsonb       NOT NULL,
    source_service text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('PENDING', 'CLAIMED', 'SENT', 'FAILED')),
    retry_count    integer     NOT NULL,
    last_error     text,
    claimed_by     text,
    claimed_at     timestamptz,
    created_at     timestamptz NOT NULL,
    sent_at        timestamptz,
    failed_at      timestamptz
);

CREATE UNIQUE INDEX tributary_outbox_position_idx ON tributary_outbox (position);
-- The forwarder's claim scans PENDING rows in emit order.
CREATE INDEX tributary_outbox_pending_idx ON tributary_outbox (position) WHERE status = 'PENDING';
-- The per-aggregate ordering guard looks for earlier unfinished rows.
CREATE INDEX tributary_outbox_unfinished_aggregate_idx ON tributary_outbox (aggregate_id, position)
    WHERE status IN ('PENDING', 'CLAIMED') AND aggregate_id IS NOT NULL;
-- The stale-claim sweep.
CREATE INDEX tributary_outbox_claimed_idx ON tributary_outbox (claimed_at) WHERE status = 'CLAIMED';
-- Retention.
CREATE INDEX tributary_outbox_sent_idx ON tributary_outbox (sent_at) WHERE status = 'SENT';
CREATE INDEX tributary_outbox_failed_idx ON tributary_outbox (failed_at) WHERE status = 'FAILED';

-- Consumers of the in-database bus, written by every worker that runs them.
-- The forwarder reads this table to fan each event out to every subscribed
-- consumer, whichever process or service registered it.
CREATE TABLE tributary_event_consumer (
    name           text        PRIMARY KEY,
    patterns       text[]      NOT NULL,
    queue          text        NOT NULL,
    max_attempts   integer     NOT NULL,
    source_service text        NOT NULL,
    skip_own_kinds text[]      NOT NULL,
    updated_at     timestamptz NOT NULL
);

-- One lane per (consumer, aggregate): dispatch jobs of a lane get the
-- sequence numbers head_seq..last_seq; only the job with seq = head_seq is
-- available, the rest wait in River's pending state and are promoted, one
-- at a time, in the transaction that completes their predecessor.
CREATE TABLE tributary_event_lane (
    consumer     text        NOT NULL,
    aggregate_id text        NOT NULL,
    head_seq     bigint      NOT NULL,
    last_seq     bigint      NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (consumer, aggregate_id)
);
CREATE INDEX tributary_event_lane_idle_idx ON tributary_event_lane (updated_at);

-- Finds the pending dispatch job to promote. Partial: it only ever holds
-- the jobs waiting behind their lane's head.
CREATE INDEX tributary_dispatch_pending_idx ON river_job
    ((args ->> 'consumer'), (args ->> 'aggregate_id'), ((args ->> 'seq')::bigint))
    WHERE state = 'pending' AND kind = 'tributary.event.dispatch';
