package inbox

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// SplitAfterDefault is Config.SplitAfter's default. A batch of the inbound
// bridge's default size (250 messages) runs whole unless its handler
// averages over 400 us a message; past that, the few milliseconds of
// River's cost per message job (one job and its fetch, about 50 us) are
// under an eighth of the handler's time, and free workers taking the rest
// in parallel are worth it. The events' batched dispatch splits after 50
// ms, for batches of up to 100 events; an inbox's batches are larger and
// its point is to spare River's cost per message, so it waits longer.
const SplitAfterDefault = 100 * time.Millisecond

// nameMaxLen bounds an inbox's name, which every batch row and job carries.
const nameMaxLen = 128

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Config configures an Inbox.
type Config struct {
	// Name identifies the inbox: its batch rows and jobs carry it, and a
	// worker runs a job with the handler of the inbox of that name. Every
	// process that works the inbox's Queue should install it. Required: at
	// most 128 letters, digits, '.', '_' and '-'.
	Name string

	// HandleFunc handles one message. A nil error completes the message;
	// an error retries it after RetryDelayFunc's delay, as a River job of
	// its own, until MaxAttempts attempts failed (then it is discarded);
	// Permanent(err) discards it at once and river.JobCancel(err) cancels
	// it. A panic is recovered and counts as a failed attempt. ctx ends at
	// a hard shutdown or River's job timeout. Required.
	HandleFunc func(ctx context.Context, msg *Message) error

	// Queue is the River queue of the inbox's jobs. It must be a name
	// River accepts (at most 64 lower-case letters and digits, separated by
	// single '_', '-' or '|'). Every process that works the queue must
	// Install inboxes: River fails a job whose kind has no worker (and
	// discards it after its attempts), while a process that installed other
	// inboxes only snoozes it. So give inboxes a queue of their own unless
	// every worker of the queue runs them.
	//
	// Defaults to river.QueueDefault ("default").
	Queue string

	// MaxAttempts is how many times the handler runs for a message before
	// the message is discarded; at most 32767 (River's column).
	//
	// Defaults to river.MaxAttemptsDefault (25).
	MaxAttempts int

	// RetryDelayFunc returns the wait after a message's failed attempt
	// (attempt is 1 after the first).
	//
	// Defaults to River's default retry policy: attempt^4 seconds, with up
	// to 10% jitter either way (1 s, 16 s, 81 s, ...).
	RetryDelayFunc func(attempt int) time.Duration

	// SplitAfter bounds how long a batch keeps its messages in one worker
	// slot: once its handlers have run this long, the messages not yet
	// handled become River jobs of their own (tributary.inbox.message, not
	// attempted yet), which any free worker takes. Negative: never split.
	//
	// Defaults to SplitAfterDefault (100 ms).
	SplitAfter time.Duration
}

// WithDefaults returns cfg with every unset optional field at its default.
func (cfg Config) WithDefaults() Config {
	cfg.Queue = cmp.Or(cfg.Queue, river.QueueDefault)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, river.MaxAttemptsDefault)
	cfg.SplitAfter = cmp.Or(cfg.SplitAfter, SplitAfterDefault)
	return cfg
}

// Validate checks cfg with its defaults applied and returns a
// *queue.ConfigError naming the first bad field and its value.
func (cfg Config) Validate() error {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.Name == "":
		return &queue.ConfigError{Name: "Name", Reason: "an inbox needs a name"}
	case len(cfg.Name) > nameMaxLen || !nameRE.MatchString(cfg.Name):
		return &queue.ConfigError{Name: "Name", Value: cfg.Name, Reason: fmt.Sprintf("use at most %d letters, digits, '.', '_' and '-'", nameMaxLen)}
	case cfg.HandleFunc == nil:
		return &queue.ConfigError{Name: "HandleFunc", Reason: fmt.Sprintf("inbox %q needs a handler", cfg.Name)}
	case !riverjob.ValidQueueName(cfg.Queue):
		return &queue.ConfigError{Name: "Queue", Value: cfg.Queue,
			Reason: fmt.Sprintf("inbox %q: River accepts at most 64 lower-case letters and digits, separated by single '_', '-' or '|'", cfg.Name)}
	case cfg.MaxAttempts < 1 || cfg.MaxAttempts > math.MaxInt16:
		return &queue.ConfigError{Name: "MaxAttempts", Value: fmt.Sprint(cfg.MaxAttempts),
			Reason: fmt.Sprintf("inbox %q: want 1 to %d (0 for the default, %d)", cfg.Name, math.MaxInt16, river.MaxAttemptsDefault)}
	}
	return nil
}
