package events

import (
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Retention defaults of the events' clean-up targets.
const (
	SentRetentionDefault   = 7 * 24 * time.Hour
	FailedRetentionDefault = 30 * 24 * time.Hour
	LaneRetentionDefault   = 7 * 24 * time.Hour
)

// OutboxSentCleanup is the clean-up target of SENT outbox rows, by sent_at:
// 7 days by default.
func OutboxSentCleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "outbox_sent", Table: "tributary_outbox",
		Where: "status = 'SENT' AND sent_at < $1", Retention: SentRetentionDefault}
}

// OutboxFailedCleanup is the clean-up target of FAILED outbox rows, by
// failed_at: 30 days by default. Replay them before that.
func OutboxFailedCleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "outbox_failed", Table: "tributary_outbox",
		Where: "status = 'FAILED' AND failed_at < $1", Retention: FailedRetentionDefault}
}

// IdleLaneCleanup is the clean-up target of per-aggregate ordering lanes
// with nothing unfinished, last touched before the cut-off: 7 days by
// default. A lane is recreated by its aggregate's next event.
func IdleLaneCleanup() queue.CleanupTarget {
	return queue.CleanupTarget{Name: "event_lanes", Table: "tributary_event_lane",
		Where: "updated_at < $1 AND head_seq > last_seq", Retention: LaneRetentionDefault}
}
