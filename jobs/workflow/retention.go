package workflow

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// RetentionDefault is how long a finished workflow's record (its row and
// every task's: states, attempts, errors, outputs) is kept after it
// finished. It is independent of River's job retention: River deletes a
// task's finished job after a day by default; the workflow's record stays
// whole until the workflow itself is past this.
const RetentionDefault = 30 * 24 * time.Hour

// Clean-up target for the scheduler's clean-up job: rows of CleanupTable
// matching CleanupWhere ($1 is the cut-off) are deletable, oldest first by
// CleanupOrderBy. Deleting a workflow's row deletes its task rows (ON
// DELETE CASCADE, through the task table's primary key).
//
// Order the batch's selection by CleanupOrderBy: without statistics
// (autovacuum off) Postgres reads the whole table for `finished_at < $1
// LIMIT n` when few rows qualify (50 ms for 200,000 workflows, nothing to
// delete); ordered, it walks the partial index on finished_at and stops
// (under 0.1 ms; 10 ms for a batch of 500 with their 2,500 tasks).
const (
	CleanupTable   = "tributary_workflow"
	CleanupWhere   = "finished_at < $1"
	CleanupOrderBy = "finished_at"
)

// DeleteBatchSizeDefault bounds the workflows one delete statement removes
// (each with all its tasks).
const DeleteBatchSizeDefault = 500

const deleteFinishedSQL = `
DELETE FROM /*schema*/tributary_workflow WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM /*schema*/tributary_workflow WHERE ` + CleanupWhere + `
    ORDER BY ` + CleanupOrderBy + ` LIMIT $2 FOR UPDATE SKIP LOCKED))`

// DeleteFinishedBefore deletes workflows that finished before cutoff, with
// their tasks, at most batchSize workflows per statement (default 500)
// until none is left, and returns how many workflows it deleted. Running
// workflows are never deleted, whatever their age.
func DeleteFinishedBefore(ctx context.Context, db queue.DBTX, schema string, cutoff time.Time, batchSize int) (int, error) {
	batchSize = cmp.Or(batchSize, DeleteBatchSizeDefault)
	if batchSize < 1 {
		return 0, fmt.Errorf("invalid batch size %d: must be at least 1", batchSize)
	}
	sql := queue.Qualify(schema, deleteFinishedSQL)
	total := 0
	for {
		tag, err := db.Exec(ctx, sql, cutoff, batchSize)
		if err != nil {
			return total, fmt.Errorf("error deleting workflows finished before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < batchSize {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
