-- Batch staging by chunks: one row holds the items of one staging call (up
-- to a bound), instead of one row per item (docs/ARCHITECTURE.md, "Batch
-- flushes"). A row per item cost Postgres about 15 us per item (the insert
-- with its index entry, then the delete after the flush); a row per chunk
-- shares that among the chunk's items.
--
-- The table is renamed, not copied: an existing row is a chunk of one item
-- (the defaults below), so items staged before the upgrade, and a batch
-- claimed before it (a range of ids), flush unchanged afterwards. Adding
-- columns with constant defaults does not rewrite the table.
ALTER TABLE tributary_batch_item RENAME TO tributary_batch_chunk;
ALTER INDEX tributary_batch_item_pkey RENAME TO tributary_batch_chunk_pkey;
ALTER SEQUENCE tributary_batch_item_id_seq RENAME TO tributary_batch_chunk_id_seq;

-- payload: the chunk's items, each one compacted JSON value, joined by
-- newlines (no newline after the last), so a chunk of one item is that item.
-- byte_size: the items' bytes, newlines not counted.
-- item_count: how many items the chunk holds.
-- done_items, done_bytes: how many of its first items (and their bytes) a
-- flush already wrote when an object ended inside the chunk; the rest of
-- the chunk starts at payload offset done_bytes + done_items.
ALTER TABLE tributary_batch_chunk
    ADD COLUMN item_count integer NOT NULL DEFAULT 1,
    ADD COLUMN done_items integer NOT NULL DEFAULT 0,
    ADD COLUMN done_bytes bigint  NOT NULL DEFAULT 0,
    -- NOT VALID: the existing rows hold by their defaults, so the check
    -- need not scan a backlog under this statement's lock.
    ADD CONSTRAINT tributary_batch_chunk_done_check CHECK (done_items >= 0 AND done_items < item_count) NOT VALID;

-- A chunk is larger than the 2 kB from which Postgres moves a value out of
-- line, and the default storage then first tries to compress it (pglz):
-- inserting 300 chunks of 1,000 items (190 kB each) took 1.77 s that way
-- and 0.23 s stored out of line uncompressed. The objects are gzipped
-- anyway, and the chunks are deleted minutes later.
ALTER TABLE tributary_batch_chunk ALTER COLUMN payload SET STORAGE EXTERNAL;
