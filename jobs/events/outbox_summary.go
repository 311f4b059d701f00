package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// OutboxSummary is the outbox's state at a glance: rows per status and how
// far forwarding lags behind emitting.
type OutboxSummary struct {
	// Counts holds every status of Statuses.
	Counts map[string]queue.Count `json:"counts,omitempty"`
	// OldestPendingAt is the creation time of the oldest row still waiting
	// to be forwarded; ForwardLagSeconds is its age.
	OldestPendingAt   *time.Time `json:"oldest_pending_at,omitempty"`
	ForwardLagSeconds float64    `json:"forward_lag_seconds"`
}

// outboxCountSQL counts each status up to the cap ($1). The statuses are
// literals (from Statuses, never from input) so each branch can use its
// status's partial index: a parameter would hide the predicate and read the
// table.
func outboxCountSQL() string {
	var b strings.Builder
	for i, status := range Statuses() {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		fmt.Fprintf(&b, `SELECT '%[1]s', (SELECT count(*) FROM (
    SELECT 1 FROM /*schema*/tributary_outbox o WHERE o.status = '%[1]s' LIMIT $1) capped)`, status)
	}
	return b.String()
}

// What the planner is asked to estimate for a status whose count reached
// the cap.
const outboxStatusEstimateSQL = `SELECT 1 FROM /*schema*/tributary_outbox o WHERE o.status = $1`

// The oldest PENDING row by emit order, through the forwarder's own partial
// index.
const outboxLagSQL = `
SELECT created_at, now() FROM /*schema*/tributary_outbox
WHERE status = 'PENDING' ORDER BY position LIMIT 1`

// ReadOutboxSummary counts the outbox's rows per status, each exactly up to
// countCap (at least 1) and by the planner's estimate above it, and reads
// the forward lag. Its cost is bounded by the cap, not by the table.
func ReadOutboxSummary(ctx context.Context, db queue.DBTX, schema string, countCap int) (*OutboxSummary, error) {
	countCap = max(1, countCap)
	rows, err := db.Query(ctx, queue.Qualify(schema, outboxCountSQL()), countCap)
	if err != nil {
		return nil, fmt.Errorf("error counting outbox rows: %w", err)
	}
	sum := &OutboxSummary{Counts: map[string]queue.Count{}}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error counting outbox rows: %w", err)
		}
		sum.Counts[status] = queue.Count{N: n}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error counting outbox rows: %w", err)
	}
	for status, c := range sum.Counts {
		if c.N < int64(countCap) {
			continue
		}
		est, err := queue.EstimateRows(ctx, db, queue.Qualify(schema, outboxStatusEstimateSQL), status)
		if err != nil {
			return nil, fmt.Errorf("error counting outbox rows: %w", err)
		}
		sum.Counts[status] = queue.Count{N: max(est, c.N), Approximate: true}
	}
	var oldest, now *time.Time
	err = db.QueryRow(ctx, queue.Qualify(schema, outboxLagSQL)).Scan(&oldest, &now)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("error reading the outbox lag: %w", err)
	}
	if oldest != nil {
		sum.OldestPendingAt = oldest
		sum.ForwardLagSeconds = max(0, now.Sub(*oldest).Seconds())
	}
	return sum, nil
}
