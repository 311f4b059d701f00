package inbox

import (
	"time"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// OrphanRetentionDefault is how long OrphanCleanup keeps a batch row whose
// job is gone or finished: River's own retention of discarded jobs, so an
// operator can retry a discarded batch job for as long as River keeps it.
const OrphanRetentionDefault = 7 * 24 * time.Hour

// OrphanCleanup is the clean-up target of batch rows that no job will run:
// rows created before the cut-off (7 days by default) whose batch job was
// deleted, cancelled or discarded (by an operator, or after its own
// records failed MaxAttempts times). A row is otherwise deleted by the
// transaction that finishes its job, seconds after it was written. Each
// candidate costs one primary-key probe of river_job
// (riverjob.UnfinishedJobExists); the table holds only what waits, so no
// index on created_at is kept for it (every index entry would cost each
// insert).
func OrphanCleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "inbox_orphans", Table: "tributary_inbox_batch",
		Where:     "created_at < $1 AND NOT " + riverjob.UnfinishedJobExists("tributary_inbox_batch.job_id"),
		Retention: OrphanRetentionDefault}
}
