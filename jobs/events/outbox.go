package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// Outbox row statuses.
const (
	StatusPending = "PENDING"
	StatusClaimed = "CLAIMED"
	StatusSent    = "SENT"
	StatusFailed  = "FAILED"
)

// Statuses lists the outbox row statuses.
func Statuses() []string { return []string{StatusPending, StatusClaimed, StatusSent, StatusFailed} }

// OutboxRow is one tributary_outbox row, for listings.
type OutboxRow struct {
	outbox.Event
	Position   int64      `json:"position"`
	Status     string     `json:"status"`
	RetryCount int        `json:"retry_count"`
	LastError  string     `json:"last_error,omitempty"`
	ClaimedBy  string     `json:"claimed_by,omitempty"`
	ClaimedAt  *time.Time `json:"claimed_at,omitempty"`
	SentAt     *time.Time `json:"sent_at,omitempty"`
	FailedAt   *time.Time `json:"failed_at,omitempty"`
}

// outboxColumns are the columns of an OutboxRow; %s is the payload's.
const outboxColumns = `id::text, position, event_type, event_version, event_kind, coalesce(aggregate_id, ''), %s, metadata,
    source_service, created_at, status, retry_count, coalesce(last_error, ''), coalesce(claimed_by, ''), claimed_at, sent_at, failed_at`

func scanOutboxRow(rows pgx.Rows) (OutboxRow, error) {
	var r OutboxRow
	var payload, metadata []byte
	err := rows.Scan(&r.ID, &r.Position, &r.EventType, &r.EventVersion, &r.EventKind, &r.AggregateID, &payload, &metadata,
		&r.SourceService, &r.CreatedAt, &r.Status, &r.RetryCount, &r.LastError, &r.ClaimedBy, &r.ClaimedAt, &r.SentAt, &r.FailedAt)
	if err != nil {
		return r, err
	}
	r.Payload = json.RawMessage(payload)
	if err := json.Unmarshal(metadata, &r.Metadata); err != nil {
		return r, fmt.Errorf("error decoding metadata of outbox row %s: %w", r.ID, err)
	}
	return r, nil
}

// ListParams filters an outbox listing.
type ListParams struct {
	// Status keeps only rows in this status. Empty: all.
	Status string
	// Before continues a listing: only rows with a smaller position.
	// Defaults to 0: from the newest row.
	Before int64
	// Limit bounds the number of rows, newest first. Defaults to 100.
	Limit int
	// WithoutPayload leaves every row's Payload empty, so a page of rows
	// does not carry payloads of up to MaxPayloadBytes each.
	WithoutPayload bool
}

// ListOutbox returns outbox rows, newest first.
func ListOutbox(ctx context.Context, db queue.DBTX, schema string, p ListParams) ([]OutboxRow, error) {
	if p.Status != "" && !validStatus(p.Status) {
		return nil, fmt.Errorf("invalid outbox status %q: want one of %v", p.Status, Statuses())
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	payload := "payload"
	if p.WithoutPayload {
		payload = "NULL::jsonb"
	}
	// Only the filters that are set become conditions, so a status filter
	// is a literal predicate its partial index can match.
	var conds []string
	var args []any
	if p.Status != "" {
		args = append(args, p.Status)
		conds = append(conds, fmt.Sprintf("status = $%d", len(args)))
	}
	if p.Before != 0 {
		args = append(args, p.Before)
		conds = append(conds, fmt.Sprintf("position < $%d", len(args)))
	}
	sql := `SELECT ` + fmt.Sprintf(outboxColumns, payload) + ` FROM /*schema*/tributary_outbox`
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, p.Limit)
	sql += fmt.Sprintf(" ORDER BY position DESC LIMIT $%d", len(args))
	rows, err := db.Query(ctx, queue.Qualify(schema, sql), args...)
	if err != nil {
		return nil, fmt.Errorf("error listing outbox rows: %w", err)
	}
	defer rows.Close()
	out := []OutboxRow{}
	for rows.Next() {
		r, err := scanOutboxRow(rows)
		if err != nil {
			return nil, fmt.Errorf("error reading outbox row: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func validStatus(s string) bool {
	for _, v := range Statuses() {
		if v == s {
			return true
		}
	}
	return false
}

// ErrInvalidOutboxID is returned (wrapped, with the value) for an id that
// is not a UUID.
var ErrInvalidOutboxID = errors.New("invalid outbox id")

// ErrNotReplayable is returned (wrapped, with the ids) when a replay names
// rows that do not exist or are still waiting to be forwarded.
var ErrNotReplayable = errors.New("outbox rows cannot be replayed")

// ReplayOutbox puts the given SENT or FAILED rows back to PENDING (retry
// count reset) so the forwarders send them again, and wakes the
// forwarders. All or nothing: an id that does not exist or is PENDING or
// CLAIMED fails the whole call. A replayed SENT row goes to every
// destination again: it reaches every consumer again (a new dispatch each),
// at the end of its aggregate's lane. A replayed FAILED row goes only to
// the destinations that do not have it yet (delivered_to), like a retry.
func ReplayOutbox(ctx context.Context, db queue.DBTX, schema string, ids []string) (int, error) {
	for _, id := range ids {
		if _, err := uuid.Parse(id); err != nil {
			return 0, fmt.Errorf("%w %q: want a UUID", ErrInvalidOutboxID, id)
		}
	}
	var n int
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, queue.Qualify(schema, `
            SELECT id::text, status FROM /*schema*/tributary_outbox WHERE id = ANY($1::uuid[]) FOR UPDATE`), ids)
		if err != nil {
			return fmt.Errorf("error reading outbox rows to replay: %w", err)
		}
		found := map[string]string{}
		for rows.Next() {
			var id, status string
			if err := rows.Scan(&id, &status); err != nil {
				rows.Close()
				return err
			}
			found[id] = status
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var bad []string
		for _, id := range ids {
			norm := uuid.MustParse(id).String()
			switch status, ok := found[norm]; {
			case !ok:
				bad = append(bad, id+" (not found)")
			case status == StatusPending || status == StatusClaimed:
				bad = append(bad, id+" (still "+status+")")
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			return fmt.Errorf("%w: %v", ErrNotReplayable, bad)
		}
		// The count comes from the statement's result, not its tag: the
		// tag counts the one row of the SELECT around the UPDATE.
		if err := tx.QueryRow(ctx, queue.Qualify(schema, replaySQL), ids, notifyChannel(schema)).Scan(&n, nil); err != nil {
			return fmt.Errorf("error replaying outbox rows: %w", err)
		}
		return nil
	})
	return n, err
}

// ReplayBatchSizeDefault is how many FAILED rows one transaction of
// ReplayFailed puts back to PENDING.
const ReplayBatchSizeDefault = 1000

// ReplayFailedParams configures ReplayFailedBatches.
type ReplayFailedParams struct {
	// BatchSize bounds the rows one transaction replays. Defaults to
	// ReplayBatchSizeDefault (1,000).
	BatchSize int

	// ProgressFunc, when set, is called after each committed batch with the
	// number of rows replayed so far.
	ProgressFunc func(replayed int)
}

// ReplayFailed puts every FAILED row back to PENDING (retry count reset),
// in batches of ReplayBatchSizeDefault, and returns how many. Each goes only
// to the destinations that do not have it yet.
func ReplayFailed(ctx context.Context, db queue.DBTX, schema string) (int, error) {
	return ReplayFailedBatches(ctx, db, schema, ReplayFailedParams{})
}

// ReplayFailedBatches puts every FAILED row back to PENDING in emit order,
// each batch in a transaction of its own that wakes the forwarders, so a
// large replay neither holds its locks in one long transaction nor waits
// for the last batch before forwarding starts. Rows that become FAILED
// again while it runs are not replayed a second time. On an error the
// batches already committed stay replayed; the count says how many.
func ReplayFailedBatches(ctx context.Context, db queue.DBTX, schema string, p ReplayFailedParams) (int, error) {
	if p.BatchSize <= 0 {
		p.BatchSize = ReplayBatchSizeDefault
	}
	sql := queue.Qualify(schema, replayFailedBatchSQL)
	var total int
	var after int64
	for {
		var n int
		var last *int64
		err := inTx(ctx, db, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, sql, after, p.BatchSize, notifyChannel(schema)).Scan(&n, &last, nil); err != nil {
				return fmt.Errorf("error replaying failed outbox rows: %w", err)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, nil
		}
		total += n
		after = *last
		if p.ProgressFunc != nil {
			p.ProgressFunc(total)
		}
		if n < p.BatchSize {
			return total, nil
		}
	}
}

// replayFailedBatchSQL replays the next $2 FAILED rows after position $1
// and returns how many and the last position. The NOTIFY is delivered at
// commit; it is the batch's only statement, so it adds no other round
// trip, and a replay is rare enough that the notify lock's cost at commit
// does not matter.
const replayFailedBatchSQL = `
WITH batch AS (
    SELECT id, position FROM /*schema*/tributary_outbox
    WHERE status = 'FAILED' AND position > $1
    ORDER BY position
    LIMIT $2
    FOR UPDATE
), upd AS (
    UPDATE /*schema*/tributary_outbox o
    SET status = 'PENDING', retry_count = 0, last_error = NULL, claimed_by = NULL, claimed_at = NULL,
        sent_at = NULL, failed_at = NULL, next_attempt_at = NULL
    FROM batch WHERE o.id = batch.id AND o.status = 'FAILED'
    RETURNING o.position
)
SELECT count(*)::int, max(position), (SELECT pg_notify($3, '') FROM (SELECT 1 FROM upd LIMIT 1) AS one)
FROM upd`

// replaySQL puts the rows $1 back to PENDING and returns how many, waking
// the forwarders at commit when there were any.
const replaySQL = `
WITH upd AS (
    UPDATE /*schema*/tributary_outbox
    SET status = 'PENDING', retry_count = 0, last_error = NULL, claimed_by = NULL, claimed_at = NULL,
        sent_at = NULL, failed_at = NULL, next_attempt_at = NULL,
        delivered_to = CASE WHEN status = 'SENT' THEN NULL ELSE delivered_to END
    WHERE id = ANY($1::uuid[]) AND status IN ('SENT', 'FAILED')
    RETURNING 1
)
SELECT count(*)::int, (SELECT pg_notify($2, '') FROM (SELECT 1 FROM upd LIMIT 1) AS one)
FROM upd`

// inTx runs fn in a transaction on db: a new one on a pool or connection, a
// nested one (savepoint) when db already is a transaction.
func inTx(ctx context.Context, db queue.DBTX, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, fn)
}
