package limits

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// PollIntervalDefault is how often an admitter looks at every limit when
// no notification woke it: the bound on the wait of a scheduled or retried
// job that came due, and of a notification lost with a connection.
const PollIntervalDefault = time.Second

// Config configures a Limiter.
type Config struct {
	// Limits declares the limits. A job is governed by the first one that
	// matches its kind and queue. Declare the same limits in every process
	// that inserts or works their jobs: the inserting process marks the
	// jobs, any worker process admits them.
	Limits []Limit

	// Schema holds River's and tributary's tables. Defaults to "public".
	Schema string

	// Logger for the admitter. Defaults to slog.Default().
	Logger *slog.Logger

	// PollInterval is how often the admitter looks at every limit without
	// a notification. Defaults to PollIntervalDefault (1 second).
	PollInterval time.Duration

	// Holders admit the limits whose slots are not jobs: whole workflows'
	// concurrency keys (workflow.LimitHolder). With one, this process's
	// admitter applies an override of such a limit (`tributary limits
	// set workflow:KEY N`) at once; without, the next workflow of the key
	// to start or finish does. Defaults to none.
	Holders []HolderAdmitter
}

// Limiter holds a process's limits: the insert middleware that marks their
// jobs and the admitter that runs them.
type Limiter struct {
	cfg Config
	mw  *middleware
}

// New validates cfg and returns its Limiter.
func New(cfg Config) (*Limiter, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	if err := validateAll(cfg.Limits); err != nil {
		return nil, err
	}
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("PollInterval %s must not be negative", cfg.PollInterval)
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Limits = slices.Clone(cfg.Limits)
	cfg.Holders = slices.Clone(cfg.Holders)
	return &Limiter{cfg: cfg, mw: &middleware{limits: cfg.Limits}}, nil
}

// Limits returns the declared limits.
func (l *Limiter) Limits() []Limit { return slices.Clone(l.cfg.Limits) }

// Middleware is the River middleware of the limits: at insert it marks
// limited jobs, at work it completes a limited job that succeeded at once,
// so its slot returns without waiting for River's batched completion. Put
// it into queue.RuntimeConfig.Middleware (or river.Config.Middleware of
// any River client that inserts limited jobs). While it is installed,
// Client.EnqueueManyTx inserts through River rather than by COPY.
func (l *Limiter) Middleware() rivertype.Middleware { return l.mw }

// Register adds an admitter to rt and returns it (for NewCollector).
// Every worker process should run one: they take turns per limit, and one
// is enough for all limits in the schema.
func (l *Limiter) Register(rt *queue.Runtime) (*Admitter, error) {
	adm := l.NewAdmitter(rt.Client)
	if err := rt.AddService(adm); err != nil {
		return nil, err
	}
	l.mw.completer.Store(&completer{pool: rt.Pool(), admitter: adm})
	return adm, nil
}
