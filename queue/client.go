package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/migrations"
)

// EnqueueOpts are per-job insert options. Zero values take River's defaults
// (queue "default", priority 1, 25 attempts, run now).
type EnqueueOpts struct {
	// Queue to insert into. Defaults to "default".
	Queue string
	// Priority from 1 (first) to 4 (last). Defaults to 1.
	Priority int
	// MaxAttempts before the job is discarded. Defaults to 25.
	MaxAttempts int
	// ScheduledAt delays the job until then. Defaults to now.
	ScheduledAt time.Time
	// Unique makes the insert a no-op while a job of the same kind and args
	// exists in a non-finalized state (River's ByArgs uniqueness).
	Unique bool
	// UniqueOpts gives full control over River's uniqueness when Unique is
	// not enough. It wins over Unique.
	UniqueOpts *river.UniqueOpts
	// Tags are attached to the job for filtering.
	Tags []string
}

// ErrInvalidPriority reports a priority outside 1..4.
var ErrInvalidPriority = errors.New("priority must be between 1 and 4")

// ArgsError is job arguments (or a job kind) that River's table would
// refuse, reported before anything reaches the database. It wraps a
// *StorageError when the arguments are valid JSON that jsonb cannot hold.
type ArgsError struct {
	Kind string
	Err  error
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("arguments of job kind %q cannot be stored: %v", e.Kind, e.Err)
}

func (e *ArgsError) Unwrap() error { return e.Err }

// maxKindChars is River's limit on a job kind (river_job's kind_length
// check: 1 to 127 characters).
const maxKindChars = 127

// CheckArgs reports, as an *ArgsError, job arguments the enqueue methods
// would refuse before inserting: a kind River's table does not accept
// (empty, or over 127 characters), or arguments whose JSON a jsonb column
// cannot hold (see CheckJSONB). The enqueue methods call it; the CLI calls
// it before it connects.
//
// Refusing these before the insert matters inside a caller's transaction:
// a failed insert aborts the whole transaction, and Postgres's error names
// neither the job nor the value.
func CheckArgs(args river.JobArgs) error {
	kind := args.Kind()
	if err := checkKind(kind); err != nil {
		return err
	}
	if ra, ok := args.(RawArgs); ok {
		// Already JSON: no need to marshal it again to look at it.
		return checkRawJSON(ra)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return &ArgsError{Kind: kind, Err: fmt.Errorf("error encoding the arguments: %w", err)}
	}
	if err := CheckJSONB(raw); err != nil {
		return &ArgsError{Kind: kind, Err: err}
	}
	return nil
}

// checkKind is CheckArgs's check of the kind.
func checkKind(kind string) error {
	switch n := utf8.RuneCountInString(kind); {
	case n == 0:
		return &ArgsError{Kind: kind, Err: errors.New("the job kind is empty")}
	case n > maxKindChars:
		return &ArgsError{Kind: kind, Err: fmt.Errorf("the job kind has %d characters, over River's limit of %d", n, maxKindChars)}
	}
	if err := CheckText(kind); err != nil {
		return &ArgsError{Kind: kind, Err: fmt.Errorf("job kind: %w", err)}
	}
	return nil
}

// checkRawJSON is CheckArgs's check of RawArgs' JSON.
func checkRawJSON(ra RawArgs) error {
	raw, err := ra.MarshalJSON()
	if err != nil {
		return &ArgsError{Kind: ra.KindName, Err: err}
	}
	if err := CheckJSONB(raw); err != nil {
		return &ArgsError{Kind: ra.KindName, Err: err}
	}
	return nil
}

func (o *EnqueueOpts) riverOpts() (*river.InsertOpts, error) {
	if o == nil {
		return nil, nil
	}
	if o.Priority != 0 && (o.Priority < 1 || o.Priority > 4) {
		return nil, fmt.Errorf("invalid priority %d: %w", o.Priority, ErrInvalidPriority)
	}
	if o.MaxAttempts < 0 {
		return nil, fmt.Errorf("invalid max attempts %d: must be at least 1", o.MaxAttempts)
	}
	opts := &river.InsertOpts{
		Queue:       o.Queue,
		Priority:    o.Priority,
		MaxAttempts: o.MaxAttempts,
		ScheduledAt: o.ScheduledAt,
		Tags:        o.Tags,
	}
	switch {
	case o.UniqueOpts != nil:
		opts.UniqueOpts = *o.UniqueOpts
	case o.Unique:
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true}
	}
	return opts, nil
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Schema holds River's and tributary's tables. Defaults to "public".
	Schema string
	// Logger for the client and River. Defaults to slog.Default().
	Logger *slog.Logger
}

// Client is the app-side handle on tributary: it inserts jobs (and, through
// the events API, outbox rows) in the caller's transactions. It does not
// work jobs; a Runtime does. A Client is safe for concurrent use.
type Client struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	schema string
	logger *slog.Logger
	copy   *copyInsert // nil: River inserts every batch
}

// NewClient returns an insert-only client on pool.
func NewClient(pool *pgxpool.Pool, cfg ClientConfig) (*Client, error) {
	schema := cmp.Or(cfg.Schema, SchemaDefault)
	if err := migrations.ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	logger := cmp.Or(cfg.Logger, slog.Default())
	rcfg := &river.Config{Schema: schema, Logger: logger, Middleware: []rivertype.Middleware{tracingMiddleware()}}
	rc, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	return &Client{pool: pool, river: rc, schema: schema, logger: logger, copy: newCopyInsert(rcfg)}, nil
}

// Pool returns the client's connection pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema of River's and tributary's tables.
func (c *Client) Schema() string { return c.schema }

// Logger returns the client's logger.
func (c *Client) Logger() *slog.Logger { return c.logger }

// River returns the underlying River client for what tributary does not
// wrap.
func (c *Client) River() *river.Client[pgx.Tx] { return c.river }

// Enqueue inserts one job in its own transaction.
func (c *Client) Enqueue(ctx context.Context, args river.JobArgs, opts *EnqueueOpts) (*rivertype.JobInsertResult, error) {
	if err := CheckArgs(args); err != nil {
		return nil, err
	}
	ropts, err := opts.riverOpts()
	if err != nil {
		return nil, err
	}
	res, err := c.river.Insert(riverjob.WithShortInsert(ctx), args, ropts)
	if err != nil {
		return nil, fmt.Errorf("error enqueueing %s job: %w", args.Kind(), err)
	}
	return res, nil
}

// EnqueueTx inserts one job in the caller's transaction: if tx rolls back,
// the job never existed; once it commits, workers see the job.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *EnqueueOpts) (*rivertype.JobInsertResult, error) {
	if err := CheckArgs(args); err != nil {
		return nil, err
	}
	ropts, err := opts.riverOpts()
	if err != nil {
		return nil, err
	}
	res, err := c.river.InsertTx(ctx, tx, args, ropts)
	if err != nil {
		return nil, fmt.Errorf("error enqueueing %s job: %w", args.Kind(), err)
	}
	return res, nil
}

// EnqueueItem is one job of an EnqueueMany call.
type EnqueueItem struct {
	Args river.JobArgs
	Opts *EnqueueOpts
}

func (c *Client) manyParams(items []EnqueueItem) ([]river.InsertManyParams, error) {
	params := make([]river.InsertManyParams, len(items))
	for i, it := range items {
		if err := CheckArgs(it.Args); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		ropts, err := it.Opts.riverOpts()
		if err != nil {
			return nil, fmt.Errorf("job %d (%s): %w", i, it.Args.Kind(), err)
		}
		params[i] = river.InsertManyParams{Args: it.Args, InsertOpts: ropts}
	}
	return params, nil
}

// EnqueueMany inserts many jobs with River's batch insert in one
// transaction and returns how many were inserted.
func (c *Client) EnqueueMany(ctx context.Context, items []EnqueueItem) (int, error) {
	params, err := c.manyParams(items)
	if err != nil {
		return 0, err
	}
	n, err := c.river.InsertManyFast(riverjob.WithShortInsert(ctx), params)
	if err != nil {
		return 0, fmt.Errorf("error enqueueing %d jobs: %w", len(items), err)
	}
	return n, nil
}

// EnqueueManyTx is EnqueueMany in the caller's transaction. A batch of
// RawArgs jobs without unique options or tags is written with one COPY of
// tributary's own, the rows River's insert would write (see copyInsert),
// unless the River client or an OpenTelemetry provider adds to River's
// insert; every other batch goes through River's InsertManyFastTx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, items []EnqueueItem) (int, error) {
	if c.copy != nil && !otelConfigured() {
		jobs, ok, err := c.copy.copyJobs(items)
		if err != nil {
			return 0, err
		}
		if ok {
			n, err := c.copy.insert(ctx, tx, jobs)
			if err != nil {
				return 0, fmt.Errorf("error enqueueing %d jobs: %w", len(items), err)
			}
			return n, nil
		}
	}
	params, err := c.manyParams(items)
	if err != nil {
		return 0, err
	}
	n, err := c.river.InsertManyFastTx(ctx, tx, params)
	if err != nil {
		return 0, fmt.Errorf("error enqueueing %d jobs: %w", len(items), err)
	}
	if c.copy != nil {
		c.copy.accepted(items)
	}
	return n, nil
}
