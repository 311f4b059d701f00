package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tributary-run/tributary/jobs/events"
)

// LanesPage is the blocked lanes page: the aggregates of a consumer held by
// a given-up event (events.OrderingBlock), each with the job that holds it
// and why.
type LanesPage struct {
	notEnabled
	// Consumer is the filter; empty for every consumer.
	Consumer string               `json:"consumer,omitempty"`
	Lanes    []events.BlockedLane `json:"lanes"`
}

// ConsumersPage lists the event consumers.
type ConsumersPage struct {
	notEnabled
	Consumers []events.ConsumerInfo `json:"consumers"`
	// PendingCountedAt is when the consumers' Pending were counted: the
	// page and /metrics share one count, at most
	// Config.PendingDispatchesMaxAge old plus a recount.
	PendingCountedAt time.Time `json:"pending_counted_at"`
}

// laneStateIndex is created by the migration that gave lanes their state
// (0008); a schema without it shows the pages as not enabled.
const laneStateIndex = "tributary_event_lane_blocked_idx"

// BlockedLanes reads the blocked lanes page.
func (s *Server) BlockedLanes(ctx context.Context, consumer string) (*LanesPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	page := &LanesPage{notEnabled: notEnabled{Feature: "event lanes", Enabled: true}, Consumer: consumer, Lanes: []events.BlockedLane{}}
	if ok, err := s.tableExists(ctx, s.pool, laneStateIndex); err != nil || !ok {
		page.Enabled, page.Reason = false, "the event lane tables are not in this schema or not migrated (run `tributary migrate up`)"
		return page, err
	}
	lanes, err := events.ListBlockedLanes(ctx, s.pool, s.schema, events.LaneListParams{Consumer: consumer, Limit: PageSizeMax})
	if err != nil {
		return nil, err
	}
	page.Lanes = lanes
	return page, nil
}

// Consumers reads the consumers page.
func (s *Server) Consumers(ctx context.Context) (*ConsumersPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	page := &ConsumersPage{notEnabled: notEnabled{Feature: "event consumers", Enabled: true}, Consumers: []events.ConsumerInfo{}}
	if ok, err := s.tableExists(ctx, s.pool, laneStateIndex); err != nil || !ok {
		page.Enabled, page.Reason = false, "the event consumer tables are not in this schema or not migrated (run `tributary migrate up`)"
		return page, err
	}
	list, err := events.ListConsumersUncounted(ctx, s.pool, s.schema)
	if err != nil {
		return nil, err
	}
	pending, takenAt, err := s.pending.get(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Pending = pending[list[i].Name]
	}
	page.Consumers, page.PendingCountedAt = list, takenAt
	return page, nil
}

// parseConsumer checks a consumer name from a request.
func parseConsumer(raw string) (string, error) {
	if err := events.ValidateEventName(raw); err != nil {
		return "", badRequestf("invalid consumer %q: use letters, digits and . _ : -", truncateUTF8(raw, 64))
	}
	return raw, nil
}

func (s *Server) handleLanes(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, "consumer")
	if err != nil {
		return err
	}
	consumer := q.Get("consumer")
	if consumer != "" {
		if consumer, err = parseConsumer(consumer); err != nil {
			return err
		}
	}
	page, err := s.BlockedLanes(r.Context(), consumer)
	if err != nil {
		return err
	}
	return s.render(w, r, "lanes", "Blocked lanes", "lanes", page)
}

func (s *Server) handleConsumers(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	page, err := s.Consumers(r.Context())
	if err != nil {
		return err
	}
	return s.render(w, r, "consumers", "Consumers", "consumers", page)
}

// laneActionResult is the JSON answer of a lane action.
type laneActionResult struct {
	Action      string `json:"action"`
	Consumer    string `json:"consumer"`
	AggregateID string `json:"aggregate_id"`
	JobID       int64  `json:"job_id"`
	// JobState is the job's state after the action; "gone" for a skip of a
	// job River's retention deleted.
	JobState string `json:"job_state"`
	// ReinsertedFrom is the deleted job whose event a retry put back as
	// JobID.
	ReinsertedFrom int64 `json:"reinserted_from,omitempty"`
}

// LaneAction retries or skips the head that blocks a lane.
func (s *Server) LaneAction(ctx context.Context, consumer, aggregate, action string) (*laneActionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	var res *events.JobActionResult
	var err error
	switch action {
	case "retry":
		res, err = events.RetryLane(ctx, s.client, consumer, aggregate)
	case "skip":
		res, err = events.SkipLane(ctx, s.client, consumer, aggregate)
	default:
		return nil, notFoundf("unknown lane action %q: want retry or skip", action)
	}
	switch {
	case errors.Is(err, events.ErrUnknownConsumer):
		return nil, notFoundf("%v", err)
	case errors.Is(err, events.ErrLaneNotBlocked):
		return nil, &httpError{status: http.StatusConflict, msg: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("error running %s on aggregate %q of consumer %q: %w", action, aggregate, consumer, err)
	}
	out := &laneActionResult{Action: action, Consumer: consumer, AggregateID: aggregate, JobID: res.JobID, JobState: "gone", ReinsertedFrom: res.ReinsertedFrom}
	if res.Job != nil {
		out.JobState = string(res.Job.State)
	}
	return out, nil
}

func (s *Server) handleLaneAction(w http.ResponseWriter, r *http.Request) error {
	consumer, err := parseConsumer(r.PathValue("consumer"))
	if err != nil {
		return err
	}
	aggregate := r.PathValue("aggregate")
	if aggregate == "" {
		return badRequestf("the aggregate id is empty")
	}
	res, err := s.LaneAction(r.Context(), consumer, aggregate, r.PathValue("action"))
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard lane action", "action", res.Action, "consumer", consumer, "aggregate_id", aggregate, "job_id", res.JobID)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	http.Redirect(w, r, "/lanes", http.StatusSeeOther)
	return nil
}
