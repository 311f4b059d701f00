package limits

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Admitter moves limited jobs from pending to available while their limit
// has room. Any number of processes may run one: each pass over a limit
// locks the limit's row, so admission of one limit is serial across them,
// and counts committed job states, so the limit holds at every commit.
// Notifications (migration 0023's triggers) wake it when a limited job
// gives its slot back or starts waiting; it also looks at every limit each
// PollInterval.
type Admitter struct {
	pool    *pgxpool.Pool
	schema  string
	logger  *slog.Logger
	limits  []Limit
	poll    time.Duration
	channel string
	sql     statements

	life queue.Lifecycle
	wake chan struct{}
	mu   sync.Mutex
	// dirty are the limits notifications named since the last pass; all
	// says every limit is due (the poll, a reconnect).
	dirty map[string]bool
	all   bool
}

// NewAdmitter returns the admitter of l's limits on c's pool and schema.
func (l *Limiter) NewAdmitter(c *queue.Client) *Admitter {
	return &Admitter{
		pool: c.Pool(), schema: l.cfg.Schema, logger: l.cfg.Logger, limits: l.cfg.Limits, poll: l.cfg.PollInterval,
		channel: l.cfg.Schema + ".tributary_limit", sql: newStatements(l.cfg.Schema),
		wake: make(chan struct{}, 1), dirty: map[string]bool{},
	}
}

// Name implements queue.Service.
func (a *Admitter) Name() string { return "limits admitter" }

// Start writes the declared limits into tributary_limit and starts
// admitting.
func (a *Admitter) Start(ctx context.Context) error {
	return a.life.Start(ctx, a.Name(), func(run *queue.Run) error {
		if err := declare(ctx, a.pool, a.sql, a.limits); err != nil {
			return err
		}
		a.markAll()
		run.Go(func() { a.listenLoop(run.Stopping()) })
		run.Go(func() { a.admitLoop(run.Stopping()) })
		return nil
	})
}

// Stop stops admitting; a pass under way finishes or rolls back.
func (a *Admitter) Stop(ctx context.Context) error {
	_, err := a.life.Stop(ctx)
	return err
}

func (a *Admitter) markAll() {
	a.mu.Lock()
	a.all = true
	a.mu.Unlock()
	a.signal()
}

func (a *Admitter) mark(name string) {
	a.mu.Lock()
	a.dirty[name] = true
	a.mu.Unlock()
	a.signal()
}

func (a *Admitter) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// due takes the limits to look at now: the ones notifications named, or
// every limit in the table when all is set.
func (a *Admitter) due(ctx context.Context) ([]string, error) {
	a.mu.Lock()
	all, dirty := a.all, a.dirty
	a.all, a.dirty = false, map[string]bool{}
	a.mu.Unlock()
	if all {
		return names(ctx, a.pool, a.sql)
	}
	out := make([]string, 0, len(dirty))
	for n := range dirty {
		out = append(out, n)
	}
	return out, nil
}

func (a *Admitter) admitLoop(ctx context.Context) {
	ticker := time.NewTicker(a.poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			a.markAll()
			continue
		case <-a.wake:
		}
		due, err := a.due(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.logger.WarnContext(ctx, "error listing limits; trying again at the next poll", "error", err)
			}
			continue
		}
		for _, name := range due {
			if ctx.Err() != nil {
				return
			}
			if _, err := a.Pass(ctx, name); err != nil && ctx.Err() == nil {
				a.logger.WarnContext(ctx, "error admitting limited jobs; trying again at the next poll", "limit", name, "error", err)
			}
		}
	}
}

// Pass admits what limit name has room for, in one transaction, and wakes
// River's producers of the admitted jobs' queues. It returns how many jobs
// it admitted. The admitter calls it; tests and tools may too.
func (a *Admitter) Pass(ctx context.Context, name string) (int, error) {
	var queues []string
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var maxRunning int
		var cursor string
		err := tx.QueryRow(ctx, a.sql.lock, pgx.QueryExecModeExec, name).Scan(&maxRunning, &cursor)
		if err == pgx.ErrNoRows {
			return nil // not declared (yet): its jobs wait
		}
		if err != nil {
			return fmt.Errorf("error locking limit %q: %w", name, err)
		}
		use, err := riverjob.LimitUse(ctx, tx, a.schema, name)
		if err != nil {
			return err
		}
		keys := make([]keyUse, len(use))
		for i, u := range use {
			keys[i] = keyUse{key: u.Key, used: u.Used, waiting: u.Waiting}
		}
		gs, next := plan(keys, maxRunning, 0, cursor)
		if len(gs) == 0 {
			return nil
		}
		ks, ns := make([]string, len(gs)), make([]int32, len(gs))
		for i, g := range gs {
			ks[i], ns[i] = g.key, int32(g.n)
		}
		if queues, err = riverjob.AdmitLimited(ctx, tx, a.schema, name, ks, ns); err != nil {
			return err
		}
		if next != cursor {
			if _, err := tx.Exec(ctx, a.sql.setCursor, name, next); err != nil {
				return fmt.Errorf("error moving the cursor of limit %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil || len(queues) == 0 {
		return 0, err
	}
	if err := riverjob.Wake(ctx, a.pool, a.schema, queues); err != nil {
		a.logger.WarnContext(ctx, "error waking River for admitted jobs; its poll finds them", "limit", name, "error", err)
	}
	a.logger.DebugContext(ctx, "admitted limited jobs", "limit", name, "count", len(queues))
	return len(queues), nil
}

// listen opens a dedicated connection (a pooled one would be lost to the
// pool's other users) and subscribes to the limits channel.
func (a *Admitter) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, a.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("error opening the admitter's LISTEN connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{a.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("error listening on %s: %w", a.channel, err)
	}
	return conn, nil
}

func (a *Admitter) listenLoop(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			conn.Close(closeCtx)
		}
	}()
	for {
		if conn == nil {
			var err error
			if conn, err = a.listen(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				a.logger.WarnContext(ctx, "admitter cannot listen, relying on its poll", "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(a.poll):
				}
				continue
			}
			a.markAll() // notifications may have been missed while down
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.logger.WarnContext(ctx, "admitter lost its LISTEN connection, reconnecting", "error", err)
			closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn.Close(closeCtx)
			cancel()
			conn = nil
			continue
		}
		a.mark(n.Payload)
	}
}
