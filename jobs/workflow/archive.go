package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// ArchiveStream is the batch stream ArchiveCleanup writes finished
// workflows into: its objects (JSONL.gz, one workflow a line) are where the
// archive lands (`tributary workflows archived` lists them).
const ArchiveStream = "tributary.workflows"

// ArchiveCleanup is Cleanup with an archive: each batch writes every
// workflow it deletes as one JSON line into the batch stream stream
// (stager.StageManyTx) in the transaction of the delete, so the line is
// staged if and only if the workflow is deleted: a crash anywhere in the
// batch leaves both, and the next run archives them once. The flushes
// write the staged lines to the object store exactly once. A line holds
// the workflow's row, its tasks (with outputs and errors), its step
// records, its signals and its attributes:
//
//	{"workflow": {...}, "tasks": [...], "steps": [...], "signals": [...], "attributes": {...}}
//
// A workflow whose line is larger than the stream's MaxBytes cannot be
// staged and fails its batch: raise the stream's MaxBytes. See
// docs/decisions/0042-archive-in-the-delete-transaction.md.
func ArchiveCleanup(stager *batch.Stager, stream string) queue.CleanupTarget {
	return archiveCleanup(stager, stream, nil)
}

// archiveCleanup is ArchiveCleanup with a hook run between the staging and
// the delete (tests: a crash there).
func archiveCleanup(stager *batch.Stager, stream string, afterStage func() error) queue.CleanupTarget {
	t := Cleanup()
	t.DeleteFunc = func(ctx context.Context, tx pgx.Tx, schema string, cutoff time.Time, limit int) (int64, error) {
		return archiveBatch(ctx, tx, stager, stream, schema, cutoff, limit, afterStage)
	}
	return t
}

// archiveLinesSQL locks (skipping rows another transaction holds) at most
// $2 workflows finished before $1, oldest first as Cleanup's batches, and
// returns each as its archive line. The related rows are read per table for
// the whole batch (IN the selection) rather than per workflow: the signal
// table has no index that finds a workflow's consumed signals.
const archiveLinesSQL = `
WITH sel AS MATERIALIZED (
    SELECT id FROM /*schema*/tributary_workflow WHERE finished_at < $1 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED
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
SELECT w.id::text, jsonb_build_object('workflow', to_jsonb(w), 'tasks', coalesce(tasks.j, '[]'), 'steps', coalesce(steps.j, '[]'),
    'signals', coalesce(signals.j, '[]'), 'attributes', coalesce(attrs.j, '{}'))::text
FROM sel JOIN /*schema*/tributary_workflow w ON w.id = sel.id
LEFT JOIN tasks ON tasks.workflow_id = w.id
LEFT JOIN steps ON steps.workflow_id = w.id
LEFT JOIN signals ON signals.workflow_id = w.id
LEFT JOIN attrs ON attrs.workflow_id = w.id`

const deleteArchivedSQL = `DELETE FROM /*schema*/tributary_workflow WHERE id = ANY($1::uuid[])`

func archiveBatch(ctx context.Context, tx pgx.Tx, stager *batch.Stager, stream, schema string, cutoff time.Time, limit int, afterStage func() error) (int64, error) {
	rows, err := tx.Query(ctx, queue.Qualify(schema, archiveLinesSQL), customPlan, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("error reading workflows to archive: %w", err)
	}
	var ids []string
	var lines [][]byte
	var id, line string
	if _, err := pgx.ForEachRow(rows, []any{&id, &line}, func() error {
		ids = append(ids, id)
		lines = append(lines, []byte(line))
		return nil
	}); err != nil {
		return 0, fmt.Errorf("error reading workflows to archive: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := stager.StageManyTx(ctx, tx, stream, lines); err != nil {
		return 0, fmt.Errorf("error archiving %d workflows into stream %q: %w", len(ids), stream, err)
	}
	if afterStage != nil {
		if err := afterStage(); err != nil {
			return 0, err
		}
	}
	tag, err := tx.Exec(ctx, queue.Qualify(schema, deleteArchivedSQL), customPlan, ids)
	if err != nil {
		return 0, fmt.Errorf("error deleting %d archived workflows: %w", len(ids), err)
	}
	return tag.RowsAffected(), nil
}
