package batch

// SQL for tributary_batch_item and tributary_batch_object. Table names carry
// the /*schema*/ marker and go through queue.Qualify, because staging runs
// on the caller's connection.
const (
	insertItemsSQL = `
INSERT INTO /*schema*/tributary_batch_item (stream, payload, byte_size, created_at)
SELECT $1, t.payload, t.byte_size, $2
FROM unnest($3::bytea[], $4::integer[]) AS t(payload, byte_size)`

	insertItemSQL = `
INSERT INTO /*schema*/tributary_batch_item (stream, payload, byte_size, created_at)
VALUES ($1, $2, $3, $4)`

	// dueSQL measures the head of a stream: how many of its first $2 items
	// there are, their payload bytes, and the time of the oldest. It reads
	// at most $2 index entries whatever the backlog.
	dueSQL = `
SELECT count(*), coalesce(sum(byte_size), 0)::bigint,
       (SELECT created_at FROM /*schema*/tributary_batch_item WHERE stream = $1 ORDER BY id LIMIT 1)
FROM (SELECT byte_size FROM /*schema*/tributary_batch_item WHERE stream = $1 ORDER BY id LIMIT $2) AS head`

	// streamsSQL lists the streams that have staged items with a loose
	// index scan over the primary key, so it costs one index probe per
	// stream instead of a scan of every item.
	streamsSQL = `
WITH RECURSIVE s AS (
    (SELECT stream FROM /*schema*/tributary_batch_item ORDER BY stream LIMIT 1)
    UNION ALL
    SELECT (SELECT i.stream FROM /*schema*/tributary_batch_item i WHERE i.stream > s.stream ORDER BY i.stream LIMIT 1)
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

	// measureClaimSQL measures the head of a stream (its first $2 items:
	// count, payload bytes, oldest time) and picks the next batch from it:
	// items in id order, at most $2 of them and at most $3 payload bytes,
	// but always at least one, so an item larger than the limit (staged
	// before the limit was lowered) gets an object of its own instead of
	// blocking the stream.
	measureClaimSQL = `
WITH head AS (
    SELECT id, byte_size, created_at
    FROM /*schema*/tributary_batch_item
    WHERE stream = $1
    ORDER BY id
    LIMIT $2
), running AS (
    SELECT id, created_at,
           sum(byte_size) OVER (ORDER BY id) AS cum,
           row_number() OVER (ORDER BY id) AS n
    FROM head
)
SELECT count(*), coalesce(max(cum), 0)::bigint, min(created_at),
       min(id) FILTER (WHERE cum <= $3 OR n = 1),
       max(id) FILTER (WHERE cum <= $3 OR n = 1),
       count(*) FILTER (WHERE cum <= $3 OR n = 1),
       coalesce(max(cum) FILTER (WHERE cum <= $3 OR n = 1), 0)::bigint,
       min(created_at) FILTER (WHERE cum <= $3 OR n = 1),
       max(created_at) FILTER (WHERE cum <= $3 OR n = 1)
FROM running`

	insertClaimSQL = `
INSERT INTO /*schema*/tributary_batch_object
    (batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes,
     compressed_bytes, first_item_at, last_item_at, claimed_by_job, claimed_at)
VALUES ($1, $2, $3, 'claimed', $4, $5, $6, $7, 0, $8, $9, $10, $11)
RETURNING id`

	// selectBatchItemsSQL reads a claimed batch. Items committed late with
	// an id inside the range are included on a rewrite; that is fine because
	// the rewrite replaces the whole object.
	selectBatchItemsSQL = `
SELECT payload, created_at
FROM /*schema*/tributary_batch_item
WHERE stream = $1 AND id BETWEEN $2 AND $3
ORDER BY id`

	// deleteItemsSQL deletes a written batch by its range. The flusher
	// compares the count with the items it wrote: more means an item with
	// an id inside the range committed after the object was read, and the
	// object is written again with it.
	deleteItemsSQL = `
DELETE FROM /*schema*/tributary_batch_item
WHERE stream = $1 AND id BETWEEN $2 AND $3`

	markWrittenSQL = `
UPDATE /*schema*/tributary_batch_object
SET status = 'written', item_count = $2, bytes = $3, compressed_bytes = $4,
    first_item_at = $5, last_item_at = $6, written_at = $7
WHERE id = $1 AND status = 'claimed' AND claimed_by_job = $8`

	deleteClaimSQL = `
DELETE FROM /*schema*/tributary_batch_object
WHERE id = $1 AND status = 'claimed' AND claimed_by_job = $2`
)
