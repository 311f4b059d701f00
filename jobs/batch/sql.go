package batch

// SQL for tributary_batch_chunk and tributary_batch_object. Table names carry
// the /*schema*/ marker and go through queue.Qualify, because staging runs
// on the caller's connection.
const (
	// insertChunksSQL stages chunks: each payload is its items joined by
	// newlines (see migration 0015).
	insertChunksSQL = `
INSERT INTO /*schema*/tributary_batch_chunk (stream, payload, byte_size, item_count, created_at)
SELECT $1, t.payload, t.byte_size, t.item_count, $2
FROM unnest($3::bytea[], $4::integer[], $5::integer[]) AS t(payload, byte_size, item_count)`

	insertChunkSQL = `
INSERT INTO /*schema*/tributary_batch_chunk (stream, payload, byte_size, item_count, created_at)
VALUES ($1, $2, $3, $4, $5)`

	// dueSQL measures the head of a stream: the items and payload bytes
	// left in its first $2 chunks, how many chunks that was, and the time of
	// the oldest. It reads at most $2 index entries whatever the backlog.
	dueSQL = `
SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(b), 0)::bigint, count(*),
       (SELECT created_at FROM /*schema*/tributary_batch_chunk WHERE stream = $1 ORDER BY id LIMIT 1)
FROM (SELECT item_count - done_items AS n, byte_size - done_bytes AS b
      FROM /*schema*/tributary_batch_chunk WHERE stream = $1 ORDER BY id LIMIT $2) AS head`

	// streamsSQL lists the streams that have staged items with a loose
	// index scan over the primary key, so it costs one index probe per
	// stream instead of a scan of every item.
	streamsSQL = `
WITH RECURSIVE s AS (
    (SELECT stream FROM /*schema*/tributary_batch_chunk ORDER BY stream LIMIT 1)
    UNION ALL
    SELECT (SELECT c.stream FROM /*schema*/tributary_batch_chunk c WHERE c.stream > s.stream ORDER BY c.stream LIMIT 1)
    FROM s WHERE s.stream IS NOT NULL
)
SELECT stream FROM s WHERE stream IS NOT NULL`

	// claimedSQL lists the claimed batches (one per stream at most) and the
	// jobs that claimed them, for the age timer's search for orphans.
	claimedSQL = `
SELECT stream, claimed_by_job FROM /*schema*/tributary_batch_object WHERE status = 'claimed'`

	selectClaimSQL = `
SELECT id, batch_id, key, first_item_id, last_item_id, claimed_by_job
FROM /*schema*/tributary_batch_object
WHERE stream = $1 AND status = 'claimed'
FOR UPDATE`

	adoptClaimSQL = `
UPDATE /*schema*/tributary_batch_object
SET claimed_by_job = $2
WHERE id = $1 AND status = 'claimed' AND claimed_by_job = $3`

	// measureClaimSQL measures the head of a stream (its first $2 chunks,
	// as dueSQL) and picks the chunks of the next batch: in id order, up to
	// the one in which the batch reaches $3 items or $4 payload bytes, but
	// always at least one. The batch may end inside its last chunk; which
	// of that chunk's items fit is decided when the object is written
	// (writeObject), so an item larger than the limit (staged before the
	// limit was lowered) gets an object of its own instead of blocking the
	// stream. The counts of the batch are estimates until then.
	measureClaimSQL = `
WITH head AS (
    SELECT id, item_count - done_items AS n, byte_size - done_bytes AS b, created_at
    FROM /*schema*/tributary_batch_chunk
    WHERE stream = $1
    ORDER BY id
    LIMIT $2
), running AS (
    SELECT id, n, b, created_at,
           (sum(n) OVER w - n < $3 AND sum(b) OVER w - b < $4) OR row_number() OVER w = 1 AS in_batch
    FROM head
    WINDOW w AS (ORDER BY id)
)
SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(b), 0)::bigint, count(*), min(created_at),
       min(id) FILTER (WHERE in_batch),
       max(id) FILTER (WHERE in_batch),
       least(coalesce(sum(n) FILTER (WHERE in_batch), 0), $3)::integer,
       least(coalesce(sum(b) FILTER (WHERE in_batch), 0), $4)::bigint,
       min(created_at) FILTER (WHERE in_batch),
       max(created_at) FILTER (WHERE in_batch)
FROM running`

	insertClaimSQL = `
INSERT INTO /*schema*/tributary_batch_object
    (batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes,
     compressed_bytes, first_item_at, last_item_at, claimed_by_job, claimed_at)
VALUES ($1, $2, $3, 'claimed', $4, $5, $6, $7, 0, $8, $9, $10, $11)
RETURNING id`

	// selectBatchChunksSQL reads the chunks of a claimed batch. A chunk
	// committed late with an id inside the range is read on a rewrite; that
	// is fine because the rewrite replaces the whole object, and the finish
	// deletes only the chunks the object holds.
	selectBatchChunksSQL = `
SELECT id, payload, item_count, byte_size, done_items, done_bytes, created_at
FROM /*schema*/tributary_batch_chunk
WHERE stream = $1 AND id BETWEEN $2 AND $3
ORDER BY id`

	// deleteChunksSQL deletes the chunks an object holds entirely.
	deleteChunksSQL = `
DELETE FROM /*schema*/tributary_batch_chunk
WHERE stream = $1 AND id = ANY($2::bigint[])`

	// advanceChunkSQL records that an object ended inside a chunk: its
	// first $3 items ($4 bytes) are written. The old count guards against
	// a second finish of the same read.
	advanceChunkSQL = `
UPDATE /*schema*/tributary_batch_chunk
SET done_items = $3, done_bytes = $4
WHERE stream = $1 AND id = $2 AND done_items = $5`

	markWrittenSQL = `
UPDATE /*schema*/tributary_batch_object
SET status = 'written', item_count = $2, bytes = $3, compressed_bytes = $4,
    first_item_at = $5, last_item_at = $6, written_at = $7
WHERE id = $1 AND status = 'claimed' AND claimed_by_job = $8`

	deleteClaimSQL = `
DELETE FROM /*schema*/tributary_batch_object
WHERE id = $1 AND status = 'claimed' AND claimed_by_job = $2`
)
