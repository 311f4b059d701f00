package events

import (
	"context"
	"fmt"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Retention defaults for the clean-up schedules.
const (
	SentRetentionDefault   = 7 * 24 * time.Hour
	FailedRetentionDefault = 30 * 24 * time.Hour
	// DeleteBatchSizeDefault bounds one delete statement, so clean-up never
	// holds many row locks or writes a huge WAL burst at once.
	DeleteBatchSizeDefault = 1000
)

// DeleteSentBefore deletes SENT outbox rows sent before cutoff, in batches
// of batchSize (default 1000) until none is left, and returns how many.
func DeleteSentBefore(ctx context.Context, db queue.DBTX, schema string, cutoff time.Time, batchSize int) (int, error) {
	return deleteBatched(ctx, db, schema, "SENT", "sent_at", cutoff, batchSize)
}

// DeleteFailedBefore deletes FAILED outbox rows that failed before cutoff,
// in batches, and returns how many.
func DeleteFailedBefore(ctx context.Context, db queue.DBTX, schema string, cutoff time.Time, batchSize int) (int, error) {
	return deleteBatched(ctx, db, schema, "FAILED", "failed_at", cutoff, batchSize)
}

func deleteBatched(ctx context.Context, db queue.DBTX, schema, status, column string, cutoff time.Time, batchSize int) (int, error) {
	if batchSize <= 0 {
		batchSize = DeleteBatchSizeDefault
	}
	sql := queue.Qualify(schema, `
        DELETE FROM /*schema*/tributary_outbox WHERE id IN (
            SELECT id FROM /*schema*/tributary_outbox
            WHERE status = '`+status+`' AND `+column+` < $1
            LIMIT $2 FOR UPDATE SKIP LOCKED)`)
	total := 0
	for {
		tag, err := db.Exec(ctx, sql, cutoff, batchSize)
		if err != nil {
			return total, fmt.Errorf("error deleting %s outbox rows before %s: %w", status, cutoff.Format(time.RFC3339), err)
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

// DeleteIdleLanesBefore deletes ordering lanes with nothing unfinished that
// were last touched before cutoff, in batches, and returns how many. A lane
// is recreated when its aggregate gets a new event.
func DeleteIdleLanesBefore(ctx context.Context, db queue.DBTX, schema string, cutoff time.Time, batchSize int) (int, error) {
	if batchSize <= 0 {
		batchSize = DeleteBatchSizeDefault
	}
	sql := queue.Qualify(schema, `
        DELETE FROM /*schema*/tributary_event_lane WHERE (consumer, aggregate_id) IN (
            SELECT consumer, aggregate_id FROM /*schema*/tributary_event_lane
            WHERE updated_at < $1 AND head_seq > last_seq
            LIMIT $2 FOR UPDATE SKIP LOCKED)
        AND head_seq > last_seq`)
	total := 0
	for {
		tag, err := db.Exec(ctx, sql, cutoff, batchSize)
		if err != nil {
			return total, fmt.Errorf("error deleting idle event lanes: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < batchSize {
			return total, nil
		}
	}
}
