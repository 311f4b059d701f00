package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/events"
)

var outboxStatuses = []string{"PENDING", "CLAIMED", "SENT", "FAILED"}

// OutboxRow is one tributary_outbox row in the list.
type OutboxRow struct {
	ID          string     `json:"id"`
	Position    int64      `json:"position"`
	EventType   string     `json:"event_type"`
	AggregateID string     `json:"aggregate_id,omitempty"`
	Status      string     `json:"status"`
	RetryCount  int        `json:"retry_count"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	SentAt      *time.Time `json:"sent_at,omitempty"`
}

// OutboxPage is the outbox page: counts by status, the forward lag and the
// newest rows.
type OutboxPage struct {
	notEnabled
	Status string           `json:"status,omitempty"`
	Counts map[string]Count `json:"counts,omitempty"`
	// OldestPendingAt is the creation time of the oldest row still waiting
	// to be forwarded; ForwardLagSeconds is its age.
	OldestPendingAt   *time.Time  `json:"oldest_pending_at,omitempty"`
	ForwardLagSeconds float64     `json:"forward_lag_seconds"`
	Rows              []OutboxRow `json:"rows,omitempty"`
	NextBefore        int64       `json:"next_before,omitempty"`
	NextURL           string      `json:"-"`
}

// outboxCountSQL counts each status up to the cap ($1). The statuses are
// literals (from outboxStatuses) so each branch can use its status's
// partial index: a parameter would hide the predicate and read the table.
func outboxCountSQL() string {
	var b strings.Builder
	for i, status := range outboxStatuses {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		fmt.Fprintf(&b, `SELECT '%[1]s', (SELECT count(*) FROM (
    SELECT 1 FROM /*schema*/tributary_outbox o WHERE o.status = '%[1]s' LIMIT $1) capped)`, status)
	}
	return b.String()
}

// The oldest PENDING row by emit order, through the forwarder's own partial
// index.
const outboxLagSQL = `
SELECT created_at, now() FROM /*schema*/tributary_outbox
WHERE status = 'PENDING' ORDER BY position LIMIT 1`

const outboxListSQL = `
SELECT id::text, position, event_type, coalesce(aggregate_id, ''), status, retry_count,
       coalesce(left(last_error, 300), ''), created_at, sent_at
FROM /*schema*/tributary_outbox`

func parseOutboxQuery(v url.Values) (status string, before int64, err error) {
	status = strings.ToUpper(strings.TrimSpace(v.Get("status")))
	if status != "" && !slices.Contains(outboxStatuses, status) {
		return "", 0, badRequestf("invalid status %q: want one of %s", v.Get("status"), strings.Join(outboxStatuses, ", "))
	}
	if raw := strings.TrimSpace(v.Get("before")); raw != "" {
		before, err = strconv.ParseInt(raw, 10, 64)
		if err != nil || before < 1 {
			return "", 0, badRequestf("invalid cursor before=%q: want a positive integer", raw)
		}
	}
	return status, before, nil
}

// Outbox reads the outbox page.
func (s *Server) Outbox(ctx context.Context, status string, before int64) (*OutboxPage, error) {
	var page *OutboxPage
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		page, err = s.outbox(ctx, tx, status, before)
		return err
	})
	return page, err
}

func (s *Server) outbox(ctx context.Context, tx pgx.Tx, status string, before int64) (*OutboxPage, error) {
	page, err := s.outboxSummary(ctx, tx)
	if err != nil || !page.Enabled {
		return page, err
	}
	page.Status = status
	var conds []string
	var args []any
	if status != "" {
		args = append(args, status)
		conds = append(conds, fmt.Sprintf("status = $%d", len(args)))
	}
	if before != 0 {
		args = append(args, before)
		conds = append(conds, fmt.Sprintf("position < $%d", len(args)))
	}
	sql := outboxListSQL
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, PageSizeDefault+1)
	sql += fmt.Sprintf(" ORDER BY position DESC LIMIT $%d", len(args))
	rows, err := tx.Query(ctx, s.q(sql), args...)
	if err != nil {
		return nil, fmt.Errorf("error listing outbox rows: %w", err)
	}
	defer rows.Close()
	page.Rows = []OutboxRow{}
	for rows.Next() {
		var o OutboxRow
		if err := rows.Scan(&o.ID, &o.Position, &o.EventType, &o.AggregateID, &o.Status, &o.RetryCount, &o.LastError, &o.CreatedAt, &o.SentAt); err != nil {
			return nil, fmt.Errorf("error scanning outbox rows: %w", err)
		}
		page.Rows = append(page.Rows, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error listing outbox rows: %w", err)
	}
	if len(page.Rows) > PageSizeDefault {
		page.Rows = page.Rows[:PageSizeDefault]
		page.NextBefore = page.Rows[len(page.Rows)-1].Position
		q := url.Values{}
		if status != "" {
			q.Set("status", status)
		}
		q.Set("before", strconv.FormatInt(page.NextBefore, 10))
		page.NextURL = "/outbox?" + q.Encode()
	}
	return page, nil
}

// outboxSummary reads the outbox counts and forward lag.
func (s *Server) outboxSummary(ctx context.Context, tx pgx.Tx) (*OutboxPage, error) {
	page := &OutboxPage{notEnabled: notEnabled{Feature: "outbox", Enabled: true}}
	ok, err := s.tableExists(ctx, tx, "tributary_outbox")
	if err != nil {
		return nil, err
	}
	if !ok {
		page.Enabled = false
		page.Reason = "the outbox tables are not in this schema (run `tributary migrate up` with a build that has events)"
		return page, nil
	}
	counts, err := s.cappedCounts(ctx, tx, s.outboxCountSQL, "/*schema*/tributary_outbox o", "o.status = $1")
	if err != nil {
		return nil, fmt.Errorf("error counting outbox rows: %w", err)
	}
	page.Counts = counts
	var oldest, now *time.Time
	err = tx.QueryRow(ctx, s.q(outboxLagSQL)).Scan(&oldest, &now)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("error reading the outbox lag: %w", err)
	}
	if oldest != nil {
		page.OldestPendingAt = oldest
		page.ForwardLagSeconds = max(0, now.Sub(*oldest).Seconds())
	}
	return page, nil
}

func (s *Server) handleOutbox(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, "status", "before")
	if err != nil {
		return err
	}
	status, before, err := parseOutboxQuery(q)
	if err != nil {
		return err
	}
	page, err := s.Outbox(r.Context(), status, before)
	if err != nil {
		return err
	}
	return s.render(w, r, "outbox", "Outbox", "outbox", page)
}

// cappedCounts counts rows per value with countSQL (parameter: the cap) and replaces counts at the cap with the planner's estimate for
// "SELECT 1 FROM <from> WHERE <cond>" with the value as $1.
func (s *Server) cappedCounts(ctx context.Context, tx pgx.Tx, countSQL, from, cond string) (map[string]Count, error) {
	rows, err := tx.Query(ctx, s.q(countSQL), s.cfg.CountCap)
	if err != nil {
		return nil, err
	}
	counts := map[string]Count{}
	for rows.Next() {
		var v string
		var n int64
		if err := rows.Scan(&v, &n); err != nil {
			rows.Close()
			return nil, err
		}
		counts[v] = Count{N: n}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for v, c := range counts {
		if c.N < int64(s.cfg.CountCap) {
			continue
		}
		est, err := s.estimateFrom(ctx, tx, from, cond, v)
		if err != nil {
			return nil, err
		}
		counts[v] = Count{N: max(est, c.N), Approximate: true}
	}
	return counts, nil
}

// outboxReplayResult is the JSON answer of an outbox replay.
type outboxReplayResult struct {
	Replayed int `json:"replayed"`
}

// ReplayOutbox puts SENT or FAILED rows back to PENDING through the events
// package (all or nothing); all replays every FAILED row.
func (s *Server) ReplayOutbox(ctx context.Context, ids []string, all bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	if ok, err := s.tableExists(ctx, s.pool, "tributary_outbox"); err != nil {
		return 0, err
	} else if !ok {
		return 0, notFoundf("the outbox is not enabled in this schema")
	}
	if !all {
		for _, id := range ids {
			if _, err := uuid.Parse(id); err != nil {
				return 0, badRequestf("invalid outbox id %q: want a UUID", id)
			}
		}
	}
	var n int
	var err error
	if all {
		n, err = events.ReplayFailed(ctx, s.pool, s.schema)
	} else {
		n, err = events.ReplayOutbox(ctx, s.pool, s.schema, ids)
	}
	if errors.Is(err, events.ErrNotReplayable) {
		return 0, &httpError{status: http.StatusConflict, msg: err.Error()}
	}
	if err != nil {
		return 0, fmt.Errorf("error replaying outbox rows: %w", err)
	}
	return n, nil
}

func (s *Server) handleOutboxReplay(w http.ResponseWriter, r *http.Request) error {
	return s.outboxReplay(w, r, []string{r.PathValue("id")}, false)
}

func (s *Server) handleOutboxReplayFailed(w http.ResponseWriter, r *http.Request) error {
	return s.outboxReplay(w, r, nil, true)
}

func (s *Server) outboxReplay(w http.ResponseWriter, r *http.Request, ids []string, all bool) error {
	n, err := s.ReplayOutbox(r.Context(), ids, all)
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard outbox replay", "replayed", n, "all_failed", all)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, outboxReplayResult{Replayed: n})
		return nil
	}
	http.Redirect(w, r, "/outbox", http.StatusSeeOther)
	return nil
}
