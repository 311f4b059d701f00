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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/events"
)

// OutboxPage is the outbox page: counts by status, the forward lag and the
// newest rows (without their payloads).
type OutboxPage struct {
	notEnabled
	Status string `json:"status,omitempty"`
	events.OutboxSummary
	Rows       []events.OutboxRow `json:"rows,omitempty"`
	NextBefore int64              `json:"next_before,omitempty"`
	NextURL    string             `json:"-"`
}

func parseOutboxQuery(v url.Values) (status string, before int64, err error) {
	status = strings.ToUpper(strings.TrimSpace(v.Get("status")))
	if status != "" && !slices.Contains(events.Statuses(), status) {
		return "", 0, badRequestf("invalid status %q: want one of %s", v.Get("status"), strings.Join(events.Statuses(), ", "))
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
	page.Rows, err = events.ListOutbox(ctx, tx, s.schema, events.ListParams{Status: status, Before: before, Limit: PageSizeDefault + 1, WithoutPayload: true})
	if err != nil {
		return nil, err
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
	sum, err := events.ReadOutboxSummary(ctx, tx, s.schema, s.cfg.CountCap)
	if err != nil {
		return nil, err
	}
	page.OutboxSummary = *sum
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
