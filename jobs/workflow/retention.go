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
// matching CleanupWhere ($1 is the cut-off) are deletable. Deleting a
// workflow's row deletes its task rows (ON DELETE CASCADE, through the
// task table's primary key).
const (
	CleanupTable = "tributary_workflow"
	CleanupWhere = "finished_at < $1"
)

// DeleteBatchSizeDefault bounds the workflows one delete statement removes
// (each with all its tasks).
const DeleteBatchSizeDefault = 500

const deleteFinishedSQL = `
DELETE FROM /*schema*/tributary_workflow WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM /*schema*/tributary_workflow WHERE ` + CleanupWhere + `
    LIMIT $2 FOR UPDATE SKIP LOCKED))`

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
