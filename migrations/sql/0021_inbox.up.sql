-- Inbox batches (jobs/inbox): the messages an inbox took in, one row per
-- inserting transaction, handled by one River job of kind
-- tributary.inbox.batch whose args name the row (docs/ARCHITECTURE.md,
-- "Inbox"). The messages are not in River's args: a batch there costs
-- Postgres the jsonb parse, TOAST's compression and a GIN entry per element
-- (about 15 us a message), while this row costs about 2 us a message.
--
-- messages: the batch in the inbox's binary encoding (a version byte, then
-- each message's length-prefixed fields); count: how many messages it
-- holds. job_id: the batch job that runs it now (a shutdown that leaves a
-- batch half done hands the rest to a new job and updates it), so the
-- clean-up of rows whose job is gone or finished probes river_job by its
-- primary key. No other index: the table holds only what is waiting, and
-- every index entry would cost each insert.
CREATE TABLE tributary_inbox_batch (
    -- The sequence is named, since the insert draws the id itself
    -- (jobs/inbox, insertBatchSQL) for the job's args to name it.
    id         bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME tributary_inbox_batch_id_seq) PRIMARY KEY,
    inbox      text        NOT NULL,
    count      integer     NOT NULL CHECK (count > 0),
    messages   bytea       NOT NULL,
    job_id     bigint      NOT NULL,
    created_at timestamptz NOT NULL
);

-- A batch is larger than the 2 kB from which Postgres moves a value out of
-- line, and the default storage would first try to compress it (pglz), a
-- cost for every batch to save space for the seconds the row lives.
ALTER TABLE tributary_inbox_batch ALTER COLUMN messages SET STORAGE EXTERNAL;
