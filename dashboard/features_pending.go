package dashboard

import (
	"context"
	"net/http"
)

// AMQPQueue is the depth of one AMQP queue.
type AMQPQueue struct {
	Name      string `json:"name"`
	Role      string `json:"role"` // main, retry, failed
	Messages  int    `json:"messages"`
	Consumers int    `json:"consumers"`
}

// AMQPInspector reports AMQP queue depths for the AMQP page.
type AMQPInspector interface {
	AMQPQueues(ctx context.Context) ([]AMQPQueue, error)
}

// BatchesPage is the batches page.
type BatchesPage struct {
	notEnabled
}

func (s *Server) handleBatches(w http.ResponseWriter, r *http.Request) error {
	return s.render(w, r, "batches", "Batches", "batches", BatchesPage{notEnabled{Feature: "batches", Reason: "batch flushes are not part of this build yet"}})
}

// AMQPPage is the AMQP queues page.
type AMQPPage struct {
	notEnabled
	Queues []AMQPQueue `json:"queues,omitempty"`
}

func (s *Server) handleAMQP(w http.ResponseWriter, r *http.Request) error {
	page := AMQPPage{notEnabled: notEnabled{Feature: "amqp", Enabled: s.cfg.AMQPQueues != nil}}
	if s.cfg.AMQPQueues == nil {
		page.Reason = "no AMQP bridge is configured (set AMQP_URL)"
	} else {
		qs, err := s.cfg.AMQPQueues.AMQPQueues(r.Context())
		if err != nil {
			return err
		}
		page.Queues = qs
	}
	return s.render(w, r, "amqp", "AMQP queues", "amqp", page)
}

func notWired(feature string) error {
	return &httpError{status: http.StatusNotImplemented, msg: feature + " actions are not available in this build"}
}

func (s *Server) handleDLQReplay(w http.ResponseWriter, r *http.Request) error {
	return notWired("AMQP")
}
