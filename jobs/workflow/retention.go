package workflow

import (
	"time"

	"github.com/tributary-run/tributary/queue"
)

// RetentionDefault is how long a finished workflow's record (its row and
// every task's: states, attempts, errors, outputs) is kept after it
// finished. It is independent of River's job retention: River deletes a
// task's finished job after a day by default; the workflow's record stays
// whole until the workflow itself is past this.
const RetentionDefault = 30 * 24 * time.Hour

// Cleanup is the clean-up target of finished workflows, by finished_at:
// 30 days by default. Deleting a workflow's row deletes its task rows (ON
// DELETE CASCADE through the task table's key), so a batch of 500 is a
// batch of 500 whole records; running workflows are never deleted,
// whatever their age. Each batch selects the oldest first (OrderBy):
// without statistics (autovacuum off) Postgres read the whole table for
// `finished_at < $1 LIMIT n` when few rows qualified, where the ordered
// selection walks the partial index on finished_at and stops.
func Cleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "workflows", Table: "tributary_workflow", Where: "finished_at < $1",
		OrderBy: "finished_at", Retention: RetentionDefault}
}
