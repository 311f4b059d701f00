package limits

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/pglisten"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Admitter moves limited jobs from pending to available while their limit
// has room. Any number of processes may run one: each pass over a limit
// locks the limit's row, so admission of one limit is serial across them,
// and counts committed job states, so the limit holds at every commit.
// Notifications (migration 0027's triggers) wake it when a limited job
// gives its slot back or starts waiting; it also looks at every limit each
// PollInterval.
type Admitter struct {
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	schema  string
	logger  *slog.Logger
	limits  []Limit
	poll    time.Duration
	channel string
	sql     statements
	// holders admit the limits whose slots are not jobs (holder.go).
	holders map[Holder]HolderAdmitter

	// works says the process works jobs (Limiter.Register of a runtime
	// with queues): the admitter then follows River's completions.
	works bool

	life  queue.Lifecycle
	stats stats
	// waiting holds, per limit, the keys this admitter's last pass left
	// with jobs waiting: the keys whose slots someone waits for.
	waitingMu sync.Mutex
	waiting   map[string]map[string]bool
	wake      chan struct{}
	mu        sync.Mutex
	// dirty are the limits notifications named since the last pass; all
	// says every limit is due (the poll, a reconnect).
	dirty map[string]bool
	all   bool
}

// NewAdmitter returns the admitter of l's limits on c's pool and schema.
// It learns of slots given back by jobs that completed (which send no
// notification) at its poll only: a worker process uses Register, whose
// admitter follows its River client's completions.
func (l *Limiter) NewAdmitter(c *queue.Client) *Admitter {
	holders := map[Holder]HolderAdmitter{}
	for _, h := range l.cfg.Holders {
		holders[h.Holder()] = h
	}
	return &Admitter{
		pool: c.Pool(), river: c.River(), schema: l.cfg.Schema, logger: l.cfg.Logger, limits: l.cfg.Limits, poll: l.cfg.PollInterval,
		channel: l.cfg.Schema + ".tributary_limit", sql: newStatements(l.cfg.Schema), holders: holders,
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
		listen := pglisten.Loop{Pool: a.pool, Channel: a.channel, Who: "admitter", Fallback: "its poll",
			Retry: a.poll, Logger: a.logger, Reconnected: a.markAll, Notified: a.mark}
		run.Go(func() { listen.Run(run.Stopping(), nil) })
		run.Go(func() { a.admitLoop(run.Stopping()) })
		if a.works {
			completed, cancel := a.river.SubscribeConfig(&river.SubscribeConfig{ChanSize: completedChanSize, Kinds: []river.EventKind{river.EventKindJobCompleted}})
			run.Go(func() {
				defer cancel()
				a.completedLoop(run.Stopping(), completed)
			})
		}
		return nil
	})
}

// Stop stops admitting; a pass under way finishes or rolls back.
func (a *Admitter) Stop(ctx context.Context) error {
	_, err := a.life.Stop(ctx)
	return err
}

// completedChanSize holds River's completion events of one batch (River's
// completer flushes up to 5,000 at once; an event it cannot deliver it
// drops with a warning).
const completedChanSize = 10_000

// completedLoop marks the limit of every limited job that River completed
// in this process: migration 0032 sends no notification when a limited job
// completes, its worker process's admitter looks instead, once the
// completion is committed (River sends its events after the batch). An
// admitter of a process that works no jobs (NewAdmitter on a client
// without queues) has none to follow.
func (a *Admitter) completedLoop(ctx context.Context, events <-chan *river.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Job == nil {
				continue
			}
			if name := limitOf(ev.Job.Metadata); name != "" {
				a.mark(name)
			}
		}
	}
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
// every limit in the table when all is set (then full says so).
func (a *Admitter) due(ctx context.Context) (out []string, full bool, err error) {
	a.mu.Lock()
	all, dirty := a.all, a.dirty
	a.all, a.dirty = false, map[string]bool{}
	a.mu.Unlock()
	if all {
		if out, err = names(ctx, a.pool, a.sql); err != nil {
			return nil, true, err
		}
		held, err := a.holdersDue(ctx)
		if err != nil && ctx.Err() == nil {
			a.logger.WarnContext(ctx, "error reading the workflow keys' use; admitting the job limits", "error", err)
		}
		return append(out, held...), true, nil
	}
	out = make([]string, 0, len(dirty))
	for n := range dirty {
		out = append(out, n)
	}
	return out, false, nil
}

func (a *Admitter) admitLoop(ctx context.Context) {
	ticker := time.NewTicker(a.poll)
	defer ticker.Stop()
	// again holds, per rate limit with jobs waiting for its period to
	// slide, when to look at it next; timer fires at the earliest.
	again := map[string]time.Time{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			a.markAll()
			continue
		case <-timer.C:
			now := time.Now()
			for name, at := range again {
				if !at.After(now) {
					delete(again, name)
					a.mark(name)
				}
			}
		case <-a.wake:
		}
		due, full, err := a.due(ctx)
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
			var wait time.Duration
			if full {
				_, wait, err = a.pass(ctx, name)
			} else {
				_, wait, err = a.passIfWaiting(ctx, name)
			}
			if err != nil && ctx.Err() == nil {
				a.logger.WarnContext(ctx, "error admitting limited jobs; trying again at the next poll", "limit", name, "error", err)
			}
			if wait > 0 {
				again[name] = time.Now().Add(wait)
			}
		}
		if len(again) > 0 {
			next := time.Duration(math.MaxInt64)
			for _, at := range again {
				next = min(next, time.Until(at))
			}
			timer.Reset(max(next, 0))
		}
	}
}

// admitPassMax bounds the jobs one pass admits. A backlog admitted in one
// statement starts only once the whole statement committed; in passes of
// this size River starts working the first while the next is admitted.
const admitPassMax = 1000

// capGrants trims gs, in order, to at most n jobs in all, and says
// whether it trimmed.
func capGrants(gs []grant, n int) ([]grant, bool) {
	total := 0
	for i, g := range gs {
		if total+g.n > n {
			out := append([]grant(nil), gs[:i]...)
			if left := n - total; left > 0 {
				g.n = left
				out = append(out, g)
			}
			return out, true
		}
		total += g.n
	}
	return gs, false
}

// lockRetry is when a limit whose row someone else held is looked at
// again: another admitter's pass, or a transaction that admitted jobs at
// insert, until it commits.
const lockRetry = 20 * time.Millisecond

// rateRetryDefault is when a rate limit whose budget is taken by jobs
// admitted but not started yet is looked at again: once they start, their
// starts say when the period frees them.
const rateRetryDefault = 20 * time.Millisecond

// Pass admits what limit name has room for, in one transaction, and wakes
// River's producers of the admitted jobs' queues. It returns how many jobs
// it admitted: 0 at once when someone else holds the limit's row (another
// pass, or a transaction that admitted jobs at insert and has not ended).
// The admitter calls it; tests and tools may too.
func (a *Admitter) Pass(ctx context.Context, name string) (int, error) {
	n, _, err := a.pass(ctx, name)
	return n, err
}

// passIfWaiting is pass when limit name has a due pending job, and
// otherwise only forgets the keys its last pass left waiting. Most marks
// are slots given back (a completion in this process, completedLoop; an
// error, a snooze or a cancellation anywhere, by notification); while
// nothing waits they free nothing worth a pass, and a
// pass counts every job of the limit holding a slot, where the probe stops
// at the first waiting one. A job that starts waiting after the probe
// sends a notification of its own (migration 0027's triggers), so none is
// missed; the poll's passes are full ones, which keep Stats current.
func (a *Admitter) passIfWaiting(ctx context.Context, name string) (int, time.Duration, error) {
	if isHolderLimit(name) {
		return a.pass(ctx, name)
	}
	waiting, err := riverjob.LimitWaiting(ctx, a.pool, a.schema, name)
	if err != nil {
		return 0, 0, err
	}
	if waiting {
		return a.pass(ctx, name)
	}
	a.waitingMu.Lock()
	delete(a.waiting, name)
	a.waitingMu.Unlock()
	return 0, 0, nil
}

// pass is Pass, which also returns, for a rate limit that left jobs
// waiting for its period to slide, how long until it may admit more (0:
// nothing to wait for).
func (a *Admitter) pass(ctx context.Context, name string) (int, time.Duration, error) {
	var queues []string
	var wait time.Duration
	var holder Holder
	var held int
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var declared, total, rate int
		var override *int
		var periodMS int64
		var cursor string
		var onBusy Busy
		err := tx.QueryRow(ctx, a.sql.lock, pgx.QueryExecModeExec, name).Scan(&declared, &override, &total, &rate, &periodMS, &onBusy, &cursor, &holder)
		if err == pgx.ErrNoRows {
			var rate int
			var h Holder
			switch err := tx.QueryRow(ctx, a.sql.exists, name).Scan(&rate, &h); {
			case err == pgx.ErrNoRows:
				return nil // not declared (yet): its jobs wait
			case err != nil:
				return fmt.Errorf("error looking up limit %q: %w", name, err)
			}
			wait = lockRetry // someone holds the row: look again
			return nil
		}
		if err != nil {
			return fmt.Errorf("error locking limit %q: %w", name, err)
		}
		period := time.Duration(periodMS) * time.Millisecond
		if rate == 0 {
			period = 0
		}
		perKey := effectiveMax(declared, override)
		if holder != HolderJobs {
			held, queues, err = a.holderPass(ctx, tx, name, holder, perKey)
			return err
		}
		use, keys, err := a.use(ctx, tx, name, period)
		if err != nil {
			return err
		}
		if cs := cancelBeforeAdmission(onBusy, keys, perKey); len(cs) > 0 {
			n, err := a.cancel(ctx, tx, name, cs)
			if err != nil {
				return err
			}
			if n > 0 {
				if use, keys, err = a.use(ctx, tx, name, period); err != nil {
					return err
				}
			}
		}
		gs, next := plan(keys, perKey, total, int64(rate), cursor)
		wait = rateWait(use, gs, rate)
		var capped bool
		if gs, capped = capGrants(gs, admitPassMax); capped {
			wait = time.Millisecond // the rest at once, in a pass of its own
		}
		a.record(name, perKey, total, keys, gs)
		if _, err := a.cancel(ctx, tx, name, cancelAfterAdmission(onBusy, keys, gs, perKey)); err != nil {
			return err
		}
		if len(gs) == 0 {
			return nil
		}
		ks, ns, ws := make([]string, len(gs)), make([]int32, len(gs)), make([]int64, len(gs))
		for i, g := range gs {
			ks[i], ns[i], ws[i] = g.key, int32(g.n), g.weight
		}
		if queues, err = riverjob.AdmitLimited(ctx, tx, a.schema, name, ks, ns, ws); err != nil {
			return err
		}
		if next != cursor {
			if _, err := tx.Exec(ctx, a.sql.setCursor, name, next); err != nil {
				return fmt.Errorf("error moving the cursor of limit %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if len(queues) == 0 {
		return held, wait, nil
	}
	if err := riverjob.Wake(ctx, a.pool, a.schema, queues); err != nil {
		a.logger.WarnContext(ctx, "error waking River for admitted jobs; its poll finds them", "limit", name, "error", err)
	}
	if holder != HolderJobs {
		return held, 0, nil
	}
	a.logger.DebugContext(ctx, "admitted limited jobs", "limit", name, "count", len(queues))
	a.stats.update(name, func(st *LimitStats) { st.Admitted += uint64(len(queues)) })
	return len(queues), wait, nil
}

// record keeps what a pass saw and planned for Stats and for
// keyHasWaiters: the keys left with jobs waiting for a slot (their own
// Max, or the limit's Total, full), whose slots are worth returning at
// once. Jobs left waiting for a rate, or for the next pass of a large
// backlog, are not waiting for a slot.
func (a *Admitter) record(name string, perKey, total int, keys []keyUse, gs []grant) {
	granted := map[string]int{}
	admitted := 0
	for _, g := range gs {
		granted[g.key] = g.n
		admitted += g.n
	}
	var used, waiting, full int
	var started int64
	for _, k := range keys {
		used += k.used
	}
	totalFull := total > 0 && used+admitted >= total
	used = 0
	behind := map[string]bool{}
	for _, k := range keys {
		used += k.used
		waiting += k.waiting
		started += k.started
		g := granted[k.key]
		if k.waiting > g {
			full++
			if totalFull || k.used+g >= perKey {
				behind[k.key] = true
			}
		}
	}
	a.waitingMu.Lock()
	if a.waiting == nil {
		a.waiting = map[string]map[string]bool{}
	}
	a.waiting[name] = behind
	a.waitingMu.Unlock()
	a.stats.update(name, func(st *LimitStats) {
		st.Max, st.Used, st.Waiting, st.FullKeys, st.Started = perKey, used+admitted, waiting-admitted, full, started
		st.Passes++
	})
}

// anyWaiters reports whether this admitter's last pass over any limit left
// jobs waiting for a slot: while none does, the middleware need not read a
// finished job's metadata.
func (a *Admitter) anyWaiters() bool {
	a.waitingMu.Lock()
	defer a.waitingMu.Unlock()
	for _, keys := range a.waiting {
		if len(keys) > 0 {
			return true
		}
	}
	return false
}

// keyHasWaiters reports whether this admitter's last pass over limit left
// jobs of key waiting.
func (a *Admitter) keyHasWaiters(limit, key string) bool {
	a.waitingMu.Lock()
	defer a.waitingMu.Unlock()
	return a.waiting[limit][key]
}

// use counts limit name's keys in tx.
func (a *Admitter) use(ctx context.Context, tx pgx.Tx, name string, period time.Duration) ([]riverjob.LimitKeyUse, []keyUse, error) {
	use, err := riverjob.LimitUse(ctx, tx, a.schema, name, period)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]keyUse, len(use))
	for i, u := range use {
		keys[i] = keyUse{key: u.Key, used: u.Used, waiting: u.Waiting, started: u.Started}
	}
	return use, keys, nil
}

// cancel cancels, in tx and through River's JobCancelTx, what a busy-key
// strategy chose, and returns how many jobs it cancelled. A cancelled
// running job keeps its slot until its worker returns.
func (a *Admitter) cancel(ctx context.Context, tx pgx.Tx, name string, cs []busyCancel) (int, error) {
	n := 0
	for _, c := range cs {
		ids, err := riverjob.LimitCancelCandidates(ctx, tx, a.schema, name, c.key, c.keepWaiting, c.holding)
		if err != nil {
			return n, err
		}
		for _, id := range ids {
			if _, err := a.river.JobCancelTx(ctx, tx, id); err != nil {
				return n, fmt.Errorf("error cancelling job %d of limit %q key %q: %w", id, name, c.key, err)
			}
			n++
		}
	}
	if n > 0 {
		a.logger.InfoContext(ctx, "cancelled jobs of busy keys", "limit", name, "count", n)
		a.stats.update(name, func(st *LimitStats) { st.Cancelled += uint64(n) })
	}
	return n, nil
}

// rateWait is how long until a rate limit may admit more of the jobs this
// pass leaves waiting: until the first counted start of such a key leaves
// the period, or rateRetryDefault when the budget is held by admitted jobs
// that have not started. 0 without a rate or with nothing left waiting.
func rateWait(use []riverjob.LimitKeyUse, gs []grant, rate int) time.Duration {
	if rate == 0 {
		return 0
	}
	granted := map[string]int{}
	for _, g := range gs {
		granted[g.key] = g.n
	}
	var wait time.Duration
	for _, u := range use {
		if u.Waiting <= granted[u.Key] {
			continue
		}
		d := rateRetryDefault
		if u.RateFreesIn != nil {
			d = max(*u.RateFreesIn, time.Millisecond)
		}
		if wait == 0 || d < wait {
			wait = d
		}
	}
	return wait
}
