package workflow

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// ArchiveStream is the batch stream whose objects ArchiveCleanup writes:
// JSONL.gz objects, one workflow a line, under the stream's key prefix, and
// recorded in tributary_batch_object (`tributary workflows archived` lists
// them).
const ArchiveStream = "tributary.workflows"

// archiveWriteTimeout bounds one archive object's write: the batch's
// transaction, and its row locks, stay open while the object is written.
const archiveWriteTimeout = time.Minute

// archiveNamespace makes an archive batch's id a name-based UUID of its
// first workflow (see archiveBatchID).
var archiveNamespace = uuid.MustParse("5b0f3c2e-8f41-4c8e-9a57-2d0e6b7c1a93")

// ArchiveCleanup is Cleanup with an archive: each clean-up batch writes the
// workflows it is about to delete as one JSONL.gz object into sink, under
// the key ObjectKey(sink's prefix, stream, first finished_at, batch id), and
// then, in the batch's one transaction, records the object in
// tributary_batch_object (batch.RecordObjectTx) and deletes the workflows.
// The object exists before the rows are gone. A line holds the workflow's
// row, its tasks (with outputs and errors), its step records, its signals
// and its attributes:
//
//	{"workflow": {...}, "tasks": [...], "steps": [...], "signals": [...], "attributes": {...}}
//
// The batch id is derived from the batch's first workflow (its id and
// finished_at). The batch's rows stay locked until the commit; a crash (or a
// failed record or delete) after the write rolls the transaction back, and
// the next run, taking the oldest workflows first in (finished_at, id)
// order, starts its batch at the same workflow and overwrites the same key:
// no second object, whatever that run's batch size (unless that workflow
// left meanwhile, re-opened by Retry or deleted by hand). See
// docs/decisions/0042-archive-before-the-delete.md.
func ArchiveCleanup(sink batch.Sink, stream string) queue.CleanupTarget {
	return archiveCleanup(sink, stream, nil)
}

// archiveCleanup is ArchiveCleanup with a hook run between the object's
// write and the record and delete (tests: a crash there).
func archiveCleanup(sink batch.Sink, stream string, afterWrite func(key string) error) queue.CleanupTarget {
	prefix := ""
	if p, ok := sink.(interface{ Prefix() string }); ok {
		prefix = p.Prefix()
	}
	a := &archiver{sink: sink, prefix: prefix, stream: stream, afterWrite: afterWrite}
	t := Cleanup()
	t.DeleteFunc = a.batch
	return t
}

type archiver struct {
	sink       batch.Sink
	prefix     string
	stream     string
	afterWrite func(key string) error
}

// archiveLinesSQL locks (skipping rows another transaction holds) at most
// $2 workflows finished before $1, oldest first as Cleanup's batches with
// the id breaking ties (a retried batch starts at the same workflow), and
// returns each as its archive line, in that order. The related rows are read per table for
// the whole batch (IN the selection) rather than per workflow: the signal
// table has no index that finds a workflow's consumed signals.
const archiveLinesSQL = `
WITH sel AS MATERIALIZED (
    SELECT id FROM /*schema*/tributary_workflow WHERE finished_at < $1 ORDER BY finished_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
), tasks AS (
    SELECT t.workflow_id, jsonb_agg(to_jsonb(t) ORDER BY t.position) AS j
    FROM /*schema*/tributary_workflow_task t WHERE t.workflow_id IN (SELECT id FROM sel) GROUP BY t.workflow_id
), steps AS (
    SELECT s.workflow_id, jsonb_agg(to_jsonb(s) ORDER BY s.created_at, s.job_id, s.name) AS j
    FROM /*schema*/tributary_workflow_step s WHERE s.workflow_id IN (SELECT id FROM sel) GROUP BY s.workflow_id
), signals AS (
    SELECT g.workflow_id, jsonb_agg(to_jsonb(g) ORDER BY g.id) AS j
    FROM /*schema*/tributary_workflow_signal g WHERE g.workflow_id IN (SELECT id FROM sel) GROUP BY g.workflow_id
), attrs AS (
    SELECT a.workflow_id, jsonb_object_agg(a.key, a.value) AS j
    FROM /*schema*/tributary_workflow_attribute a WHERE a.workflow_id IN (SELECT id FROM sel) GROUP BY a.workflow_id
)
SELECT w.id::text, w.finished_at, jsonb_build_object('workflow', to_jsonb(w), 'tasks', coalesce(tasks.j, '[]'), 'steps', coalesce(steps.j, '[]'),
    'signals', coalesce(signals.j, '[]'), 'attributes', coalesce(attrs.j, '{}'))::text
FROM sel JOIN /*schema*/tributary_workflow w ON w.id = sel.id
LEFT JOIN tasks ON tasks.workflow_id = w.id
LEFT JOIN steps ON steps.workflow_id = w.id
LEFT JOIN signals ON signals.workflow_id = w.id
LEFT JOIN attrs ON attrs.workflow_id = w.id
ORDER BY w.finished_at, w.id`

const deleteArchivedSQL = `DELETE FROM /*schema*/tributary_workflow WHERE id = ANY($1::uuid[])`

// batch is one clean-up batch: select and lock, write the object, then
// record it and delete the workflows in tx.
func (a *archiver) batch(ctx context.Context, tx pgx.Tx, schema string, cutoff time.Time, limit int) (int64, error) {
	if a.sink == nil {
		return 0, errors.New("the workflow archive needs a batch sink")
	}
	if err := batch.ValidateStream(a.stream); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, queue.Qualify(schema, archiveLinesSQL), customPlan, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("error reading workflows to archive: %w", err)
	}
	// Lines are compressed as they arrive: the batch is held compressed.
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, batch.CompressionLevelDefault)
	if err != nil {
		return 0, err
	}
	var ids []string
	var first, last time.Time
	var lineBytes int64
	var id string
	var finished time.Time
	var line []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &finished, &line}, func() error {
		if len(ids) == 0 {
			first = finished
		}
		ids = append(ids, id)
		last = finished
		lineBytes += int64(len(line))
		if _, err := zw.Write(line); err != nil {
			return err
		}
		_, err := zw.Write([]byte{'\n'})
		return err
	}); err != nil {
		return 0, fmt.Errorf("error reading workflows to archive: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	batchID := archiveBatchID(a.stream, ids[0], first)
	key := batch.ObjectKey(a.prefix, a.stream, first, batchID.String())
	wctx, cancel := context.WithTimeout(ctx, archiveWriteTimeout)
	defer cancel()
	if err := a.sink.Write(wctx, key, bytes.NewReader(buf.Bytes())); err != nil {
		return 0, fmt.Errorf("error archiving %d workflows into object %q: %w", len(ids), key, err)
	}
	if a.afterWrite != nil {
		if err := a.afterWrite(key); err != nil {
			return 0, err
		}
	}
	if _, err := batch.RecordObjectTx(ctx, tx, schema, batch.Object{
		BatchID: batchID, Stream: a.stream, Key: key, Items: len(ids), Bytes: lineBytes, CompressedBytes: int64(buf.Len()),
		FirstItemAt: first, LastItemAt: last,
	}); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, queue.Qualify(schema, deleteArchivedSQL), customPlan, ids)
	if err != nil {
		return 0, fmt.Errorf("error deleting %d archived workflows: %w", len(ids), err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		// The rows are locked since the selection: only a bug gets here.
		return 0, fmt.Errorf("error deleting %d archived workflows: %d deleted", len(ids), tag.RowsAffected())
	}
	return tag.RowsAffected(), nil
}

// archiveBatchID names a batch after its first workflow: a retry of the
// batch (same oldest workflow still there) gets the same id, so the same
// object key; the finished_at keeps a workflow id inserted again after its
// deletion from naming an archived batch's key.
func archiveBatchID(stream, firstID string, firstFinished time.Time) uuid.UUID {
	return uuid.NewSHA1(archiveNamespace, []byte(stream+"\x00"+firstID+"\x00"+firstFinished.UTC().Format(time.RFC3339Nano)))
}
