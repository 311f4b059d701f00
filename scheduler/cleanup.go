package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/queue"
)

// deleteSQL deletes at most $2 of target's deletable rows in one
// statement. ctid keeps it independent of the table's key and lets Postgres
// fetch the rows it just selected by address; SKIP LOCKED leaves rows
// another transaction holds (a replay, say) for the next run instead of
// waiting for them.
func deleteSQL(t queue.CleanupTarget) string {
	order := ""
	if t.OrderBy != "" {
		order = " ORDER BY " + t.OrderBy
	}
	return `DELETE FROM /*schema*/` + t.Table + ` WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM /*schema*/` + t.Table + ` WHERE ` + t.Where + order + `
    LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

// sqlstateQueryCanceled is what Postgres reports for a statement cancelled
// by statement_timeout.
const sqlstateQueryCanceled = "57014"

// CleanupBatchSizeDefault is how many rows one delete statement removes.
const CleanupBatchSizeDefault = 5000

// CleanupArgs is the tributary.cleanup job: delete the target's rows older
// than the retention, in batches.
type CleanupArgs struct {
	Target           string `json:"target"`
	RetentionSeconds int64  `json:"retention_seconds"`
	BatchSize        int    `json:"batch_size,omitempty"`
}

// Kind returns "tributary.cleanup".
func (CleanupArgs) Kind() string { return "tributary.cleanup" }

// CleanupResult is what one clean-up run removed.
type CleanupResult struct {
	Target   string        `json:"target"`
	Cutoff   time.Time     `json:"cutoff"`
	Deleted  int64         `json:"deleted"`
	Batches  int           `json:"batches"`   // delete statements that completed
	Timeouts int           `json:"timeouts"`  // statements cancelled by the statement timeout (and retried smaller)
	MaxBatch time.Duration `json:"max_batch"` // the longest completed statement, as the client measured it
	Duration time.Duration `json:"duration"`
	Skipped  string        `json:"skipped,omitempty"` // why nothing ran (table missing)
}

// Defaults for CleanerConfig.
const (
	CleanupStatementTimeoutDefault = 500 * time.Millisecond
	CleanupTargetBatchTimeDefault  = 200 * time.Millisecond
)

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// Targets are the tables the Cleaner may clean: a tributary.cleanup job
	// for a target not listed here is cancelled. Give it the targets of
	// CleanupConfig.
	Targets []queue.CleanupTarget

	// Logger for each run's summary.
	//
	// Defaults to the client's logger.
	Logger *slog.Logger

	// StatementTimeout bounds one delete statement, and with it how long
	// its row locks are held: Postgres cancels a statement that runs longer
	// and rolls it back, and the Cleaner retries it at half the batch size.
	// -1 disables it.
	//
	// Defaults to 500 ms.
	StatementTimeout time.Duration

	// TargetBatchTime is how long a delete statement should take. The batch
	// size halves after a slower statement and doubles (up to the requested
	// size) after one faster than a quarter of it, so a loaded database gets
	// smaller batches.
	//
	// Defaults to 200 ms.
	TargetBatchTime time.Duration

	// BatchPause is slept between two delete statements, to leave room to
	// other writers on a busy table.
	//
	// Defaults to 0: no pause.
	BatchPause time.Duration

	// BatchDoneFunc, when set, is called after every completed delete
	// statement with the target, the rows it deleted and how long it took
	// (metrics, benchmarks).
	BatchDoneFunc func(target string, deleted int64, took time.Duration)

	// NowFunc returns the current time, from which cut-offs are computed.
	//
	// Defaults to time.Now.
	NowFunc func() time.Time
}

// Cleaner deletes rows past retention in bounded batches, each batch its
// own statement and transaction, so no batch holds row locks for long and
// a cancelled run keeps what it already deleted.
type Cleaner struct {
	client  *queue.Client
	cfg     CleanerConfig
	logger  *slog.Logger
	targets map[string]queue.CleanupTarget

	mu    sync.Mutex
	stats map[string]CleanupStats
}

// CleanupStats are a target's totals since the Cleaner was created.
type CleanupStats struct {
	Runs    int64 `json:"runs"`
	Deleted int64 `json:"deleted"`
	Errors  int64 `json:"errors"`
}

// NewCleaner returns a Cleaner of cfg.Targets working on client's schema.
// A target that does not validate, or two with one name, is an error.
func NewCleaner(client *queue.Client, cfg CleanerConfig) (*Cleaner, error) {
	targets, err := indexTargets(cfg.Targets)
	if err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, client.Logger())
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, CleanupStatementTimeoutDefault)
	cfg.TargetBatchTime = cmp.Or(cfg.TargetBatchTime, CleanupTargetBatchTimeDefault)
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Cleaner{client: client, cfg: cfg, logger: cfg.Logger.With("component", "cleanup"), targets: targets, stats: map[string]CleanupStats{}}, nil
}

// indexTargets validates targets and maps them by name.
func indexTargets(targets []queue.CleanupTarget) (map[string]queue.CleanupTarget, error) {
	out := make(map[string]queue.CleanupTarget, len(targets))
	for _, t := range targets {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if _, dup := out[t.Name]; dup {
			return nil, fmt.Errorf("clean-up target %q is given twice", t.Name)
		}
		out[t.Name] = t
	}
	return out, nil
}

// Targets returns the names of the Cleaner's targets, sorted.
func (c *Cleaner) Targets() []string { return slices.Sorted(maps.Keys(c.targets)) }

// Clean deletes the target's rows older than retention, at most batchSize
// rows per statement, until none are left or ctx ends. A target whose table
// does not exist (its feature's migration is absent) is skipped, not an
// error.
func (c *Cleaner) Clean(ctx context.Context, target string, retention time.Duration, batchSize int) (res CleanupResult, err error) {
	t, ok := c.targets[target]
	if !ok {
		return res, fmt.Errorf("unknown clean-up target %q: want one of %v", target, c.Targets())
	}
	if retention <= 0 {
		return res, fmt.Errorf("invalid retention %s for clean-up target %q: must be positive", retention, target)
	}
	batchSize = cmp.Or(batchSize, CleanupBatchSizeDefault)
	if batchSize < 1 {
		return res, fmt.Errorf("invalid batch size %d for clean-up target %q: must be at least 1", batchSize, target)
	}
	start := time.Now()
	res = CleanupResult{Target: target, Cutoff: c.cfg.NowFunc().UTC().Add(-retention)}
	defer func() {
		res.Duration = time.Since(start)
		c.record(target, res, err)
	}()

	schema := c.client.Schema()
	conn, err := c.client.Pool().Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("error acquiring a connection for clean-up: %w", err)
	}
	// The statement timeout is a session setting on this connection only;
	// a connection that could not be reset is closed, not returned dirty.
	dirty := false
	defer func() {
		if dirty {
			resetCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rerr := conn.Exec(resetCtx, "RESET statement_timeout"); rerr != nil {
				_ = conn.Conn().Close(resetCtx)
			}
		}
		conn.Release()
	}()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, t.Table}.Sanitize()).Scan(&exists); err != nil {
		return res, fmt.Errorf("error checking for table %s: %w", t.Table, err)
	}
	if !exists {
		res.Skipped = "table " + t.Table + " does not exist"
		c.logger.DebugContext(ctx, "clean-up skipped: table missing", "target", target, "table", t.Table)
		return res, nil
	}
	if c.cfg.StatementTimeout > 0 {
		dirty = true
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", c.cfg.StatementTimeout.Milliseconds())); err != nil {
			return res, fmt.Errorf("error setting the clean-up statement timeout: %w", err)
		}
	}

	sql := queue.Qualify(schema, deleteSQL(t))
	size := batchSize
	for {
		batchStart := time.Now()
		n, err := deleteBatch(ctx, conn, t, sql, schema, res.Cutoff, size)
		took := time.Since(batchStart)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == sqlstateQueryCanceled && ctx.Err() == nil {
			// Cancelled by statement_timeout: rolled back, locks released.
			res.Timeouts++
			if size == 1 {
				return res, fmt.Errorf("error deleting %s rows from %s: a single row took longer than the %s statement timeout", target, t.Table, c.cfg.StatementTimeout)
			}
			size = max(1, size/2)
			c.logger.WarnContext(ctx, "clean-up statement timed out; retrying with a smaller batch", "target", target, "batch_size", size, "timeout", c.cfg.StatementTimeout)
			continue
		}
		if err != nil {
			return res, fmt.Errorf("error deleting %s rows from %s (after %d deleted): %w", target, t.Table, res.Deleted, err)
		}
		res.MaxBatch = max(res.MaxBatch, took)
		res.Batches++
		res.Deleted += n
		if c.cfg.BatchDoneFunc != nil {
			c.cfg.BatchDoneFunc(target, n, took)
		}
		if n < int64(size) {
			break
		}
		switch {
		case took > c.cfg.TargetBatchTime:
			size = max(1, size/2)
		case took < c.cfg.TargetBatchTime/4 && size < batchSize:
			size = min(batchSize, size*2)
		}
		if c.cfg.BatchPause > 0 {
			timer := time.NewTimer(c.cfg.BatchPause)
			select {
			case <-ctx.Done():
				timer.Stop()
				return res, ctx.Err()
			case <-timer.C:
			}
		}
	}
	c.logger.InfoContext(ctx, "cleaned up", "target", target, "table", t.Table, "deleted", res.Deleted,
		"batches", res.Batches, "timeouts", res.Timeouts, "cutoff", res.Cutoff, "max_batch", res.MaxBatch, "duration", time.Since(start))
	return res, nil
}

// deleteBatch deletes one batch of t's rows: the generic statement, or the
// target's DeleteFunc in a transaction of its own.
func deleteBatch(ctx context.Context, conn *pgxpool.Conn, t queue.CleanupTarget, sql, schema string, cutoff time.Time, size int) (int64, error) {
	if t.DeleteFunc == nil {
		tag, err := conn.Exec(ctx, sql, cutoff, size)
		return tag.RowsAffected(), err
	}
	var n int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		n, err = t.DeleteFunc(ctx, tx, schema, cutoff, size)
		return err
	})
	return n, err
}

func (c *Cleaner) record(target string, res CleanupResult, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats[target]
	st.Runs++
	st.Deleted += res.Deleted
	if err != nil && !errors.Is(err, context.Canceled) {
		st.Errors++
	}
	c.stats[target] = st
}

// Stats returns per-target totals.
func (c *Cleaner) Stats() map[string]CleanupStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.stats)
}

// CleanupWorker works tributary.cleanup jobs with a Cleaner.
type CleanupWorker struct {
	river.WorkerDefaults[CleanupArgs]
	Cleaner *Cleaner
}

// Timeout lets a large first clean-up (a backlog of millions of rows) run
// past River's default job timeout; batches keep each statement short.
func (w *CleanupWorker) Timeout(*river.Job[CleanupArgs]) time.Duration { return time.Hour }

// Work runs one clean-up. An unknown target or a bad retention is a
// permanent failure: retrying would not fix the args.
func (w *CleanupWorker) Work(ctx context.Context, job *river.Job[CleanupArgs]) error {
	if _, ok := w.Cleaner.targets[job.Args.Target]; !ok || job.Args.RetentionSeconds <= 0 || job.Args.BatchSize < 0 {
		return river.JobCancel(fmt.Errorf("invalid clean-up args: target %q, retention %ds, batch size %d",
			job.Args.Target, job.Args.RetentionSeconds, job.Args.BatchSize))
	}
	_, err := w.Cleaner.Clean(ctx, job.Args.Target, time.Duration(job.Args.RetentionSeconds)*time.Second, job.Args.BatchSize)
	return err
}

// RegisterCleanup registers the tributary.cleanup worker on rt and returns
// its Cleaner (for Stats).
func RegisterCleanup(rt *queue.Runtime, cfg CleanerConfig) (*Cleaner, error) {
	cleaner, err := NewCleaner(rt.Client, cfg)
	if err != nil {
		return nil, err
	}
	queue.AddWorker(rt, &CleanupWorker{Cleaner: cleaner})
	return cleaner, nil
}
