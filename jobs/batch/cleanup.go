package batch

import (
	"time"

	"github.com/tributary-run/tributary/queue"
)

// ObjectRetentionDefault is how long the record of a written batch object
// is kept.
const ObjectRetentionDefault = 30 * 24 * time.Hour

// ObjectCleanup is the clean-up target of batch object records, by
// written_at: 30 days by default. Only written records go (a claimed one is
// a batch being written now), and only the records: expire the objects in
// the sink with the bucket's lifecycle rules.
func ObjectCleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "batch_objects", Table: "tributary_batch_object",
		Where: "status = 'written' AND written_at < $1", Retention: ObjectRetentionDefault}
}
