-- Batch flushes: items staged per stream in the producer's transaction, and
-- one row per object (a claimed batch until it is written, then the record
-- of the written object).

CREATE TABLE tributary_batch_item (
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    stream     text        NOT NULL,
    -- One JSON value, compacted to one line by the stager.
    payload    bytea       NOT NULL,
    byte_size  integer     NOT NULL,
    created_at timestamptz NOT NULL,
    -- (stream, id) is every hot path: the claim (oldest items of a stream in
    -- id order), the threshold check (count and bytes of the first N items,
    -- index-only thanks to INCLUDE), the age check (the first item), the
    -- delete of a written batch, and the per-stream listing.
    PRIMARY KEY (stream, id) INCLUDE (byte_size)
);

CREATE TABLE tributary_batch_object (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Fixed when the batch is claimed; the object key ends in it, so a retry
    -- after a crash writes the same key again.
    batch_id         uuid        NOT NULL UNIQUE,
    stream           text        NOT NULL,
    key              text        NOT NULL UNIQUE,
    -- claimed: items first_item_id..last_item_id of the stream are being
    -- written; written: the object exists and its items are deleted.
    status           text        NOT NULL CHECK (status IN ('claimed', 'written')),
    first_item_id    bigint      NOT NULL,
    last_item_id     bigint      NOT NULL,
    item_count       integer     NOT NULL,
    bytes            bigint      NOT NULL,
    compressed_bytes bigint      NOT NULL,
    first_item_at    timestamptz NOT NULL,
    last_item_at     timestamptz NOT NULL,
    claimed_by_job   bigint      NOT NULL,
    claimed_at       timestamptz NOT NULL,
    written_at       timestamptz
);

-- At most one batch per stream is being written at a time.
CREATE UNIQUE INDEX tributary_batch_object_claimed_idx
    ON tributary_batch_object (stream) WHERE status = 'claimed';

-- Listing a stream's objects, newest first.
CREATE INDEX tributary_batch_object_stream_idx
    ON tributary_batch_object (stream, id);

-- Retention clean-up of object records.
CREATE INDEX tributary_batch_object_written_at_idx
    ON tributary_batch_object (written_at) WHERE status = 'written';
