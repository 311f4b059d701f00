package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// MessageKind is the River job kind of one message that left its batch: it
// failed there (the job has made its attempt), or a slow batch split it
// off. Its args hold the message whole, so it can be retried, listed and
// replayed like any job.
const MessageKind = "tributary.inbox.message"

// messageArgs are a message job's args.
type messageArgs struct {
	Inbox   string        `json:"inbox"`
	Message storedMessage `json:"message"`
}

// Kind implements river.JobArgs.
func (messageArgs) Kind() string { return MessageKind }

// storedMessage is a Message in a message job's args. The body is JSON
// where it is JSON that jsonb can store (readable in the job's args), in
// base64 otherwise.
type storedMessage struct {
	ID            string          `json:"id,omitempty"`
	Type          string          `json:"type,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	ContentType   string          `json:"content_type,omitempty"`
	Source        string          `json:"source,omitempty"`
	RoutingKey    string          `json:"routing_key,omitempty"`
	Timestamp     *time.Time      `json:"timestamp,omitempty"`
	Headers       json.RawMessage `json:"headers,omitempty"`
	Body          json.RawMessage `json:"body,omitempty"`
	BodyBase64    []byte          `json:"body_base64,omitempty"`
}

// messageJobArgs are the args of the message job of m.
func messageJobArgs(inbox string, m *Message) messageArgs {
	s := storedMessage{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, ContentType: m.ContentType,
		Source: m.Source, RoutingKey: m.RoutingKey, Headers: m.rawHeaders}
	if !m.Timestamp.IsZero() {
		ts := m.Timestamp.UTC()
		s.Timestamp = &ts
	}
	if len(s.Headers) == 0 && len(m.Headers) > 0 {
		s.Headers, _ = json.Marshal(m.Headers) // Batch.Add marshalled them once already
	}
	switch {
	case len(m.Body) == 0:
	case json.Valid(m.Body) && queue.CheckJSONB(m.Body) == nil:
		s.Body = m.Body
	default:
		s.BodyBase64 = m.Body
	}
	return messageArgs{Inbox: inbox, Message: s}
}

// message is the Message a job's args hold.
func (a messageArgs) message() (*Message, error) {
	s := a.Message
	m := &Message{ID: s.ID, Type: s.Type, CorrelationID: s.CorrelationID, ContentType: s.ContentType,
		Source: s.Source, RoutingKey: s.RoutingKey, rawHeaders: s.Headers}
	if s.Timestamp != nil {
		m.Timestamp = s.Timestamp.UTC()
	}
	if len(s.Headers) > 0 && string(s.Headers) != "null" {
		h, err := decodeHeaders(s.Headers)
		if err != nil {
			return nil, err
		}
		m.Headers = h
	}
	switch {
	case len(s.Body) > 0:
		m.Body = s.Body
	case len(s.BodyBase64) > 0:
		m.Body = s.BodyBase64
	}
	return m, nil
}

// messageWorker is the River worker of message jobs.
type messageWorker struct {
	river.WorkerDefaults[messageArgs]
	r *runner
}

// NextRetry follows the inbox's RetryDelayFunc; without one, River's
// policy.
func (w *messageWorker) NextRetry(job *river.Job[messageArgs]) time.Time {
	if ib := w.r.inboxes[job.Args.Inbox]; ib != nil && ib.cfg.RetryDelayFunc != nil {
		return time.Now().Add(ib.retryDelay(job.Attempt))
	}
	return time.Time{}
}

// Work runs the inbox's handler for the job's message. An error retries the
// job as River retries any (up to its max attempts); Permanent discards it
// at once, river.JobCancel cancels it. A panic is counted and raised again
// for River to record, with the handler's stack as the attempt's trace.
func (w *messageWorker) Work(ctx context.Context, job *river.Job[messageArgs]) error {
	r := w.r
	ib := r.inboxes[job.Args.Inbox]
	if ib == nil {
		return r.notRunHere(ctx, job.Args.Inbox, job.JobRow)
	}
	m, err := job.Args.message()
	if err != nil {
		r.logger.ErrorContext(ctx, "inbox message job cannot be decoded: cancelled", "inbox", ib.Name(), "job_id", job.ID, "error", err)
		return river.JobCancel(fmt.Errorf("inbox %q message job %d: %w", ib.Name(), job.ID, err))
	}
	m.Attempt = job.Attempt
	failed := true
	defer func() {
		if failed { // the handler panicked: counted as a failure, raised again
			ib.failed.Add(1)
		}
	}()
	err = ib.handle(ctx, m, true)
	failed = false
	if err == nil {
		ib.handled.Add(1)
		return nil
	}
	ib.failed.Add(1)
	attrs := []any{"inbox", ib.Name(), "message_id", m.ID, "job_id", job.ID, "attempt", job.Attempt, "error", err}
	switch {
	case isCancel(err):
		ib.givenUp.Add(1)
		r.logger.ErrorContext(ctx, "inbox message cancelled by its handler", attrs...)
		return err
	case IsPermanent(err):
		ib.givenUp.Add(1)
		r.logger.ErrorContext(ctx, "inbox message failed for good (permanent error): discarded", attrs...)
		return r.discard(ctx, job.JobRow, err)
	case job.Attempt >= job.MaxAttempts:
		ib.givenUp.Add(1)
		r.logger.ErrorContext(ctx, "inbox message failed for good (attempts used up)", attrs...)
		return err
	default:
		r.logger.WarnContext(ctx, "inbox message failed, will retry", attrs...)
		return err
	}
}

// discard ends the running attempt of job as discarded with err, as River
// does when a job's attempts are used up (River has no way for a worker to
// ask for it), and returns err: River's completer then finds the job no
// longer running and leaves it. If the database cannot be reached for
// that, the job is cancelled instead, so a permanent failure is never
// retried.
func (r *runner) discard(ctx context.Context, job *rivertype.JobRow, err error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	_, ferr := riverjob.FinalizeRunning(wctx, r.pool, r.schema, []riverjob.Final{{ID: job.ID, Attempt: job.Attempt,
		State: rivertype.JobStateDiscarded, Error: *attemptError(job.Attempt, err)}}, now)
	if ferr != nil {
		r.logger.WarnContext(ctx, "error discarding an inbox message job: cancelled instead", "job_id", job.ID, "error", ferr)
		return river.JobCancel(err)
	}
	return err
}
