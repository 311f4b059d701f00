package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// PlaceOrderRequest is the body of POST /orders.
type PlaceOrderRequest struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// PlaceOrderResponse is what POST /orders answers (201).
type PlaceOrderResponse struct {
	Order      *Order `json:"order"`
	EventID    string `json:"event_id"`
	ReceiptJob int64  `json:"receipt_job_id"`
	WorkflowID string `json:"workflow_id"`
}

// maxBodyBytes bounds a request body.
const maxBodyBytes = 64 << 10

// Handler is the HTTP API, every request logged to the access-log stream.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.placeOrder)
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	return s.accessLog(mux)
}

// placeOrder writes the order, emits order.placed (the order is the
// aggregate), enqueues the receipt and inserts the fulfilment workflow, all
// in one transaction: either everything exists afterwards or nothing does.
func (s *Service) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req PlaceOrderRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("invalid order JSON: %w", err))
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, errors.New("invalid order JSON: more than one value"))
		return
	}
	switch {
	case req.Customer == "":
		writeError(w, http.StatusBadRequest, errors.New(`"customer" is empty`))
		return
	case req.Cents <= 0:
		writeError(w, http.StatusBadRequest, fmt.Errorf(`"cents" %d must be positive`, req.Cents))
		return
	}
	ctx := r.Context()
	o := &Order{ID: uuid.NewString(), Customer: req.Customer, Cents: req.Cents, Status: StatusPlaced}
	var resp PlaceOrderResponse
	err := pgx.BeginFunc(ctx, s.App.Pool(), func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.st.q(insertOrderSQL), o.ID, o.Customer, o.Cents).Scan(&o.CreatedAt); err != nil {
			return fmt.Errorf("error writing order: %w", err)
		}
		o.UpdatedAt = o.CreatedAt
		eventID, err := s.App.EmitTx(ctx, tx, orderPlacedEvent, OrderPlaced{OrderID: o.ID, Customer: o.Customer, Cents: o.Cents},
			events.Meta{AggregateID: o.ID, CorrelationID: r.Header.Get("X-Request-Id"), Actor: o.Customer})
		if err != nil {
			return err
		}
		job, err := s.App.EnqueueTx(ctx, tx, SendReceiptArgs{OrderID: o.ID}, &queue.EnqueueOpts{MaxAttempts: 5})
		if err != nil {
			return err
		}
		wf, err := s.App.Workflows().InsertTx(ctx, tx, fulfilment(o))
		if err != nil {
			return err
		}
		resp = PlaceOrderResponse{Order: o, EventID: eventID, ReceiptJob: job.Job.ID, WorkflowID: wf.ID}
		return nil
	})
	if err != nil {
		s.App.Logger().ErrorContext(ctx, "placing order failed", "error", err)
		writeError(w, http.StatusInternalServerError, errors.New("the order could not be placed"))
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	o, err := s.st.get(r.Context(), s.App.Pool(), id)
	switch {
	case errors.Is(err, errOrderNotFound):
		writeError(w, http.StatusNotFound, fmt.Errorf("no order %q", id))
	case err != nil:
		s.App.Logger().ErrorContext(r.Context(), "reading order failed", "order_id", id, "error", err)
		writeError(w, http.StatusInternalServerError, errors.New("the order could not be read"))
	default:
		writeJSON(w, http.StatusOK, o)
	}
}

// AccessLogLine is one line of the access log objects.
type AccessLogLine struct {
	Time       time.Time `json:"time"`
	Method     string    `json:"method"`
	Path       string    `json:"path"`
	Status     int       `json:"status"`
	DurationMS float64   `json:"duration_ms"`
}

// accessLog stages a line per request into the access-log stream after the
// handler answered (a panic is recovered as a 500 and logged too). Staging
// is best effort: a failure is logged, the response is already sent.
func (s *Service) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		func() {
			defer func() {
				if v := recover(); v != nil {
					s.App.Logger().ErrorContext(r.Context(), "handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(v))
					if !rec.wrote {
						writeError(rec, http.StatusInternalServerError, errors.New("internal error"))
					}
					rec.status = http.StatusInternalServerError
				}
			}()
			next.ServeHTTP(rec, r)
		}()
		line, _ := json.Marshal(AccessLogLine{Time: start.UTC(), Method: r.Method, Path: r.URL.Path,
			Status: rec.status, DurationMS: float64(time.Since(start).Microseconds()) / 1000})
		if err := s.App.Stage(r.Context(), s.opts.AccessLogStream, line); err != nil {
			s.App.Logger().WarnContext(r.Context(), "staging access log line failed", "error", err)
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		http.Error(w, "encoding the response failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
