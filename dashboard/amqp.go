package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tributary-run/tributary/amqpbridge"
)

// AMQPConfig enables the AMQP page and DLQ replay.
type AMQPConfig struct {
	// Bridge is the broker and topology configuration (URL, queue prefix,
	// retry tiers).
	Bridge amqpbridge.Config

	// Queues are the logical queue names (without the prefix) whose main,
	// retry and failed queues the page shows. Only these can be replayed
	// from the dashboard.
	Queues []string
}

// AMQPPage is the AMQP queues page.
type AMQPPage struct {
	notEnabled
	Queues []amqpbridge.QueueDepth `json:"queues,omitempty"`
}

// AMQPQueues reads the depths of the configured queues with passive
// declares on a short connection of its own.
func (s *Server) AMQPQueues(ctx context.Context) (*AMQPPage, error) {
	page := &AMQPPage{notEnabled: notEnabled{Feature: "amqp", Enabled: s.cfg.AMQP != nil}}
	if s.cfg.AMQP == nil {
		page.Reason = "no AMQP bridge is configured: set AMQP_URL and name the queues to show (tributary dashboard --amqp-queues, or TRIBUTARY_DASHBOARD_AMQP_QUEUES)"
		return page, nil
	}
	if len(s.cfg.AMQP.Queues) == 0 {
		page.Queues = []amqpbridge.QueueDepth{}
		return page, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	qs, err := amqpbridge.QueueDepths(ctx, s.cfg.AMQP.Bridge, s.cfg.AMQP.Queues...)
	if err != nil {
		return nil, &httpError{status: http.StatusBadGateway, msg: "cannot read the AMQP queues: " + err.Error()}
	}
	page.Queues = qs
	return page, nil
}

func (s *Server) handleAMQP(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	page, err := s.AMQPQueues(r.Context())
	if err != nil {
		return err
	}
	return s.render(w, r, "amqp", "AMQP queues", "amqp", page)
}

// dlqReplayResult is the JSON answer of a DLQ replay.
type dlqReplayResult struct {
	Queue    string `json:"queue"`
	Replayed int    `json:"replayed"`
}

// ReplayDLQ moves up to limit messages (all when 0) from a configured
// queue's failed queue back to its main queue.
func (s *Server) ReplayDLQ(ctx context.Context, name string, limit int) (int, error) {
	if s.cfg.AMQP == nil {
		return 0, notFoundf("no AMQP bridge is configured")
	}
	logical := strings.TrimSuffix(name, ".failed")
	if !slices.Contains(s.cfg.AMQP.Queues, logical) {
		return 0, notFoundf("AMQP queue %q is not one of the dashboard's queues (%s)", name, strings.Join(s.cfg.AMQP.Queues, ", "))
	}
	dlq, err := amqpbridge.NewDLQ(s.cfg.AMQP.Bridge)
	if err != nil {
		return 0, err
	}
	n, err := dlq.Replay(ctx, logical, limit)
	if errors.Is(err, amqpbridge.ErrQueueNotFound) {
		return n, notFoundf("%v", err)
	}
	if err != nil {
		return n, fmt.Errorf("error replaying %s: %w", name, err)
	}
	return n, nil
}

func (s *Server) handleDLQReplay(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	limit := 0
	if raw := strings.TrimSpace(r.PostFormValue("limit")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return badRequestf("invalid limit %q: want 0 (all) or more", raw)
		}
		limit = n
	}
	n, err := s.ReplayDLQ(r.Context(), name, limit)
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard DLQ replay", "queue", name, "replayed", n)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, dlqReplayResult{Queue: name, Replayed: n})
		return nil
	}
	http.Redirect(w, r, "/amqp", http.StatusSeeOther)
	return nil
}
