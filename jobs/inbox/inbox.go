package inbox

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Inbox is a named intake of messages and the handler that runs for each.
// Write its batches with a Writer (or an adapter: amqpinbox.Inserter) and
// run them with Install.
type Inbox struct {
	cfg Config

	handled, failed, panics, givenUp, split, batches atomic.Int64
}

// Stats are an inbox's counters in this process since it was created.
type Stats struct {
	// Handled counts messages whose handler succeeded.
	Handled int64 `json:"handled"`
	// Failed counts failed attempts (errors and panics).
	Failed int64 `json:"failed"`
	// Panics counts handler panics (also counted in Failed).
	Panics int64 `json:"panics"`
	// GivenUp counts messages discarded or cancelled: attempts used up,
	// Permanent, river.JobCancel.
	GivenUp int64 `json:"given_up"`
	// Split counts messages a slow batch handed to jobs of their own
	// (Config.SplitAfter).
	Split int64 `json:"split"`
	// Batches counts batch jobs this process finished.
	Batches int64 `json:"batches"`
}

// New returns an inbox for cfg, its defaults filled in, or a
// *queue.ConfigError naming the first bad field.
func New(cfg Config) (*Inbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Inbox{cfg: cfg.WithDefaults()}, nil
}

// Name returns the inbox's name.
func (ib *Inbox) Name() string { return ib.cfg.Name }

// Config returns the inbox's configuration with its defaults filled in.
func (ib *Inbox) Config() Config { return ib.cfg }

// Stats returns the inbox's counters.
func (ib *Inbox) Stats() Stats {
	return Stats{Handled: ib.handled.Load(), Failed: ib.failed.Load(), Panics: ib.panics.Load(),
		GivenUp: ib.givenUp.Load(), Split: ib.split.Load(), Batches: ib.batches.Load()}
}

// handle runs the handler for m; the caller counts the outcome. A panic is
// recovered into a *PanicError; with repanic it is raised again instead,
// from the handler's stack, so that River records it (and its trace) as it
// records a worker's panic.
func (ib *Inbox) handle(ctx context.Context, m *Message, repanic bool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			ib.panics.Add(1)
			if repanic {
				panic(v)
			}
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return ib.cfg.HandleFunc(ctx, m)
}

// retryDelay is the wait after the message's failed attempt.
func (ib *Inbox) retryDelay(attempt int) time.Duration {
	if ib.cfg.RetryDelayFunc != nil {
		return max(0, ib.cfg.RetryDelayFunc(attempt))
	}
	now := time.Now()
	// River's policy counts the job's recorded errors: attempt-1 of them
	// when attempt fails.
	policy := &river.DefaultClientRetryPolicy{}
	return policy.NextRetry(&rivertype.JobRow{Errors: make([]rivertype.AttemptError, max(0, attempt-1))}).Sub(now)
}
