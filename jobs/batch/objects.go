package batch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// Object is a row of tributary_batch_object: a written object, or a batch
// claimed and being written (Status "claimed", WrittenAt nil).
type Object struct {
	ID              int64      `json:"id"`
	BatchID         uuid.UUID  `json:"batch_id"`
	Stream          string     `json:"stream"`
	Key             string     `json:"key"`
	Status          string     `json:"status"`
	Items           int        `json:"items"`
	Bytes           int64      `json:"bytes"`
	CompressedBytes int64      `json:"compressed_bytes"`
	FirstItemAt     time.Time  `json:"first_item_at"`
	LastItemAt      time.Time  `json:"last_item_at"`
	ClaimedByJob    int64      `json:"claimed_by_job"`
	ClaimedAt       time.Time  `json:"claimed_at"`
	WrittenAt       *time.Time `json:"written_at"`
}

// ListObjectsLimitDefault is how many objects ListObjects returns by
// default.
const ListObjectsLimitDefault = 50

// ListObjectsParams filters ListObjects.
type ListObjectsParams struct {
	// Stream limits the list to one stream. Empty lists every stream.
	Stream string
	// Limit is the most objects returned, newest first.
	//
	// Defaults to 50.
	Limit int
	// BeforeID continues a listing: only objects with a smaller id.
	BeforeID int64
}

const listObjectsSQL = `
SELECT id, batch_id, stream, key, status, item_count, bytes, compressed_bytes,
       first_item_at, last_item_at, claimed_by_job, claimed_at, written_at
FROM /*schema*/tributary_batch_object
WHERE ($1 = '' OR stream = $1) AND ($2 = 0 OR id < $2)
ORDER BY id DESC
LIMIT $3`

// ListObjects lists objects newest first.
func ListObjects(ctx context.Context, db queue.DBTX, schema string, p ListObjectsParams) ([]Object, error) {
	if p.Stream != "" {
		if err := ValidateStream(p.Stream); err != nil {
			return nil, err
		}
	}
	limit := cmp.Or(p.Limit, ListObjectsLimitDefault)
	if limit < 1 {
		return nil, fmt.Errorf("invalid limit %d: want at least 1", limit)
	}
	rows, err := db.Query(ctx, queue.Qualify(schema, listObjectsSQL), p.Stream, p.BeforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("error listing batch objects: %w", err)
	}
	objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Object, error) {
		var o Object
		err := r.Scan(&o.ID, &o.BatchID, &o.Stream, &o.Key, &o.Status, &o.Items, &o.Bytes, &o.CompressedBytes,
			&o.FirstItemAt, &o.LastItemAt, &o.ClaimedByJob, &o.ClaimedAt, &o.WrittenAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing batch objects: %w", err)
	}
	return objs, nil
}

// StreamCountCap bounds how many staged chunks (staging calls, or parts of
// large ones) ListStreams reads per stream, so the listing stays fast on a
// large backlog; a stream at the cap is reported with CountCapped.
const StreamCountCap = 1_000_000

// StreamStatus is what a stream has staged.
type StreamStatus struct {
	Stream       string     `json:"stream"`
	StagedItems  int64      `json:"staged_items"`
	StagedBytes  int64      `json:"staged_bytes"`
	CountCapped  bool       `json:"count_capped,omitempty"`
	OldestItemAt *time.Time `json:"oldest_item_at"`
}

const streamStatusSQL = `
SELECT coalesce(sum(item_count - done_items), 0)::bigint, coalesce(sum(byte_size - done_bytes), 0)::bigint, count(*),
       (SELECT created_at FROM /*schema*/tributary_batch_chunk WHERE stream = $1 ORDER BY id LIMIT 1)
FROM (SELECT item_count, done_items, byte_size, done_bytes FROM /*schema*/tributary_batch_chunk WHERE stream = $1 LIMIT $2) AS s`

// ListStreams reports every stream with staged items (or only stream, when
// given).
func ListStreams(ctx context.Context, db queue.DBTX, schema, stream string) ([]StreamStatus, error) {
	var streams []string
	if stream != "" {
		if err := ValidateStream(stream); err != nil {
			return nil, err
		}
		streams = []string{stream}
	} else {
		rows, err := db.Query(ctx, queue.Qualify(schema, streamsSQL))
		if err != nil {
			return nil, fmt.Errorf("error listing batch streams: %w", err)
		}
		if streams, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, fmt.Errorf("error listing batch streams: %w", err)
		}
	}
	out := make([]StreamStatus, 0, len(streams))
	for _, s := range streams {
		st := StreamStatus{Stream: s}
		var chunks int
		if err := db.QueryRow(ctx, queue.Qualify(schema, streamStatusSQL), s, StreamCountCap).Scan(&st.StagedItems, &st.StagedBytes, &chunks, &st.OldestItemAt); err != nil {
			return nil, fmt.Errorf("error measuring stream %q: %w", s, err)
		}
		if st.StagedItems == 0 {
			continue
		}
		st.CountCapped = chunks >= StreamCountCap
		out = append(out, st)
	}
	return out, nil
}

// StreamObjects totals the written objects of one stream.
type StreamObjects struct {
	Stream          string `json:"stream"`
	Objects         int64  `json:"objects"`
	Bytes           int64  `json:"bytes"`
	CompressedBytes int64  `json:"compressed_bytes"`
}

// Objects are few (each holds thousands of items) and retention bounds the
// table, so an aggregate over it stays small.
const objectTotalsSQL = `
SELECT stream, count(*), coalesce(sum(bytes), 0)::bigint, coalesce(sum(compressed_bytes), 0)::bigint
FROM /*schema*/tributary_batch_object
WHERE status = 'written'
GROUP BY stream`

// ListObjectTotals totals the written objects per stream (those retention
// has kept).
func ListObjectTotals(ctx context.Context, db queue.DBTX, schema string) ([]StreamObjects, error) {
	rows, err := db.Query(ctx, queue.Qualify(schema, objectTotalsSQL))
	if err != nil {
		return nil, fmt.Errorf("error totalling batch objects: %w", err)
	}
	totals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StreamObjects, error) {
		var t StreamObjects
		err := r.Scan(&t.Stream, &t.Objects, &t.Bytes, &t.CompressedBytes)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("error totalling batch objects: %w", err)
	}
	return totals, nil
}

const stagedSQL = `
SELECT payload, item_count, done_items, done_bytes
FROM /*schema*/tributary_batch_chunk
WHERE stream = $1
ORDER BY id
LIMIT $2`

// ReadStaged returns the items staged in stream and not yet written, in
// the order a flush takes them, at most limit of them; for inspection and
// tests (a flush streams them instead).
func ReadStaged(ctx context.Context, db queue.DBTX, schema, stream string, limit int) ([][]byte, error) {
	if err := ValidateStream(stream); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("invalid limit %d: want at least 1", limit)
	}
	// Every chunk holds at least one item: limit chunks are enough.
	rows, err := db.Query(ctx, queue.Qualify(schema, stagedSQL), stream, limit)
	if err != nil {
		return nil, fmt.Errorf("error reading the staged items of stream %q: %w", stream, err)
	}
	defer rows.Close()
	var out [][]byte
	for len(out) < limit && rows.Next() {
		var payload []byte
		var items, done int
		var doneBytes int64
		if err := rows.Scan(&payload, &items, &done, &doneBytes); err != nil {
			return nil, fmt.Errorf("error reading the staged items of stream %q: %w", stream, err)
		}
		lines := bytes.Split(payload[min(doneBytes+int64(done), int64(len(payload))):], []byte{'\n'})
		out = append(out, lines[:min(len(lines), limit-len(out))]...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the staged items of stream %q: %w", stream, err)
	}
	return out, nil
}

const recordObjectSQL = `
INSERT INTO /*schema*/tributary_batch_object
    (batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes,
     compressed_bytes, first_item_at, last_item_at, claimed_by_job, claimed_at, written_at)
VALUES ($1, $2, $3, 'written', 0, 0, $4, $5, $6, $7, $8, 0, $9, $9)
RETURNING id`

// RecordObjectTx records, in tx, an object that code other than a flush
// wrote to the sink (the workflow archive), so ListObjects, `tributary
// batches` and the object retention see it as they see a flush's: a
// tributary_batch_object row with status "written" (no staged items, no
// flush job: item ids and ClaimedByJob are 0). BatchID, Stream, Key, Items,
// Bytes, CompressedBytes, FirstItemAt and LastItemAt come from o;
// ClaimedAt and WrittenAt are now. Recording the object in the transaction
// that deletes its source rows is what makes the object and the delete
// commit together. A key or batch id already recorded is an error.
func RecordObjectTx(ctx context.Context, tx pgx.Tx, schema string, o Object) (int64, error) {
	if err := ValidateStream(o.Stream); err != nil {
		return 0, err
	}
	if o.Key == "" || o.Items < 1 {
		return 0, fmt.Errorf("invalid object %q of stream %q: want a key and at least one item", o.Key, o.Stream)
	}
	var id int64
	err := tx.QueryRow(ctx, queue.Qualify(schema, recordObjectSQL), o.BatchID, o.Stream, o.Key, o.Items, o.Bytes, o.CompressedBytes,
		o.FirstItemAt, o.LastItemAt, time.Now().UTC()).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("error recording object %q of stream %q: %w", o.Key, o.Stream, err)
	}
	return id, nil
}
