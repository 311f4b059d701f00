package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// Defaults for Config.
const (
	MisfireGraceDefault = time.Minute
	MaxSleepDefault     = 5 * time.Second
	ErrorBackoffDefault = time.Second
)

// Config configures a Scheduler.
type Config struct {
	// Logger for fires, skips and orphans.
	//
	// Defaults to the client's logger.
	Logger *slog.Logger

	// ID names this scheduler in the metadata of the jobs it inserts
	// (tributary_fired_by) and in logs.
	//
	// Defaults to "hostname/pid".
	ID string

	// MisfireGrace is how late a fire may be and still count as on time
	// under CatchUpSkip.
	//
	// Defaults to 1 minute.
	MisfireGrace time.Duration

	// MaxSleep bounds how long the scheduler sleeps when the next fire is
	// far away, so a schedule resumed from the CLI or another replica is
	// noticed within it. The scheduler otherwise wakes exactly at the
	// earliest next run.
	//
	// Defaults to 5 seconds.
	MaxSleep time.Duration

	// ErrorBackoff is the wait after a fire failed (database unreachable,
	// insert refused) before trying again.
	//
	// Defaults to 1 second.
	ErrorBackoff time.Duration

	// NowFunc returns the current time; tests set a fake clock. Every
	// decision (what is due, what was missed) uses it; the timers that wait
	// for the next fire use real time.
	//
	// Defaults to the database's clock, so replicas whose own clocks
	// disagree still agree on when a fire time has come.
	NowFunc func() time.Time

	// Test holds hooks for fault-injection tests. Leave it empty.
	Test TestConfig
}

// TestConfig holds hooks for fault-injection tests.
type TestConfig struct {
	// BeforeCommitFunc is called inside a fire's transaction after its jobs
	// were inserted and next_run_at advanced, just before the commit: a test
	// process blocks here and is killed to show that a crash mid-fire leaves
	// nothing behind.
	BeforeCommitFunc func(ctx context.Context, schedule string, fireTimes []time.Time)
}

// Scheduler is the service that fires schedules: add schedules, then add it
// to a queue.Runtime (it implements queue.Service). Every replica runs one;
// the row lock in tributary_schedule makes exactly one of them fire each
// fire time.
type Scheduler struct {
	client *queue.Client
	cfg    Config
	logger *slog.Logger

	mu        sync.Mutex // guards schedules and names until the start
	schedules map[string]*declared
	names     []string
	life      queue.Lifecycle
	wake      chan struct{}

	stats counters
}

// New returns a scheduler that inserts jobs through client.
func New(client *queue.Client, cfg Config) *Scheduler {
	cfg.Logger = cmp.Or(cfg.Logger, client.Logger())
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s/%d", cmp.Or(host, "unknown"), os.Getpid())
	}
	cfg.MisfireGrace = cmp.Or(cfg.MisfireGrace, MisfireGraceDefault)
	cfg.MaxSleep = cmp.Or(cfg.MaxSleep, MaxSleepDefault)
	cfg.ErrorBackoff = cmp.Or(cfg.ErrorBackoff, ErrorBackoffDefault)
	return &Scheduler{
		client:    client,
		cfg:       cfg,
		logger:    cfg.Logger.With("component", "scheduler"),
		schedules: map[string]*declared{},
		names:     []string{}, // not nil: pgx sends nil as NULL, and NOT (name = ANY(NULL)) matches nothing
		wake:      make(chan struct{}, 1),
	}
}

// Add registers schedules. An invalid spec, an unknown timezone, a
// duplicate name or any other bad field returns a *ScheduleError naming the
// schedule and the value, and registers none of the given schedules.
// Schedules are added before Start.
func (s *Scheduler) Add(schedules ...Schedule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Running() {
		return errors.New("cannot add schedules to a started scheduler")
	}
	batch := map[string]*declared{}
	for _, sc := range schedules {
		d, err := compile(sc)
		if err != nil {
			return err
		}
		if _, dup := s.schedules[d.name]; dup {
			return &ScheduleError{Name: d.name, Field: "name", Value: d.name, Err: ErrDuplicateName}
		}
		if _, dup := batch[d.name]; dup {
			return &ScheduleError{Name: d.name, Field: "name", Value: d.name, Err: ErrDuplicateName}
		}
		batch[d.name] = d
	}
	for _, sc := range schedules {
		s.schedules[sc.Name] = batch[sc.Name]
		s.names = append(s.names, sc.Name)
	}
	return nil
}

// Name implements queue.Service.
func (s *Scheduler) Name() string { return "scheduler" }

// Start starts the scheduler's loop and returns. The loop first writes the
// declared schedules to tributary_schedule (new ones get their first fire
// time; changed ones their new spec; paused state and history are kept) and
// reports schedules in the table that no longer are declared, retrying until
// that succeeds, then fires. Declaring in the loop keeps Start from holding
// up the services started after it, and survives a database that is briefly
// away at start-up.
func (s *Scheduler) Start(ctx context.Context) error {
	// Held through the start, so Add sees either no start or a finished one.
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.life.Start(ctx, s.Name(), func(run *queue.Run) error {
		run.Go(func() { s.run(run.Stopping()) })
		s.logger.InfoContext(ctx, "scheduler started", "schedules", len(s.names), "id", s.cfg.ID)
		return nil
	})
}

// Stop stops firing. A fire in progress is rolled back if ctx ends first,
// so it happens again on the next replica that looks.
func (s *Scheduler) Stop(ctx context.Context) error {
	stopped, err := s.life.Stop(ctx)
	if stopped && err == nil {
		s.logger.InfoContext(ctx, "scheduler stopped")
	}
	return err
}

// Wake makes the scheduler look for due schedules now instead of at its
// next timer.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// now returns NowFunc's time, or the database's: the start time of q's
// transaction, so every decision within one fire uses one instant.
func (s *Scheduler) now(ctx context.Context, q queue.DBTX) (time.Time, error) {
	if s.cfg.NowFunc != nil {
		return s.cfg.NowFunc().UTC(), nil
	}
	return dbNow(ctx, q)
}

func dbNow(ctx context.Context, q queue.DBTX) (time.Time, error) {
	var now time.Time
	if err := q.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("error reading the database clock: %w", err)
	}
	return now.UTC(), nil
}

// declare upserts every declared schedule and marks the others orphaned,
// in one transaction.
func (s *Scheduler) declare(ctx context.Context) error {
	schema := s.client.Schema()
	var orphans []string
	err := pgx.BeginFunc(ctx, s.client.Pool(), func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		for _, name := range s.names {
			d := s.schedules[name]
			_, err := tx.Exec(ctx, queue.Qualify(schema, upsertScheduleSQL),
				d.name, d.spec.Expr, d.spec.Timezone, d.kind, d.args, d.optsJSON,
				string(d.catchUp), d.catchUpMax, string(d.overlap), d.spec.Next(now), now)
			if err != nil {
				return fmt.Errorf("error storing schedule %q: %w", name, err)
			}
		}
		if _, err := tx.Exec(ctx, queue.Qualify(schema, markOrphansSQL), s.names, now); err != nil {
			return fmt.Errorf("error marking orphaned schedules: %w", err)
		}
		rows, err := tx.Query(ctx, queue.Qualify(schema, listOrphansSQL))
		if err != nil {
			return fmt.Errorf("error listing orphaned schedules: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var since time.Time
			if err := rows.Scan(&name, &since); err != nil {
				return fmt.Errorf("error reading orphaned schedule: %w", err)
			}
			orphans = append(orphans, name)
			s.logger.WarnContext(ctx, "schedule in the table is not declared in code: not firing it; delete the row or declare it again",
				"schedule", name, "orphaned_since", since)
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	s.stats.orphaned.Store(int64(len(orphans)))
	return nil
}

// run fires due schedules and sleeps until the earliest next run.
func (s *Scheduler) run(ctx context.Context) {
	for {
		err := s.declare(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.stats.errors.Add(1)
		s.logger.ErrorContext(ctx, "error declaring schedules; retrying", "error", err, "retry_in", s.cfg.ErrorBackoff)
		timer := time.NewTimer(s.cfg.ErrorBackoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
	for {
		wait := s.cfg.MaxSleep
		if err := s.fireDue(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = s.cfg.ErrorBackoff
		} else if d, ok, err := s.untilEarliest(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.WarnContext(ctx, "error reading the next fire time", "error", err)
			wait = s.cfg.ErrorBackoff
		} else if ok {
			switch {
			case d <= 0:
				// Due but not ours to fire: another replica holds the row.
				// Look again shortly in case it dies mid-fire.
				wait = 100 * time.Millisecond
			case d < wait:
				wait = d
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		}
	}
}

// untilEarliest returns how long until the earliest next run among our
// unpaused schedules, by the scheduler's clock. ok is false when there is
// none.
func (s *Scheduler) untilEarliest(ctx context.Context) (d time.Duration, ok bool, err error) {
	var next, now *time.Time
	err = s.client.Pool().QueryRow(ctx, queue.Qualify(s.client.Schema(), earliestSQL), s.names).Scan(&next, &now)
	if err != nil {
		return 0, false, fmt.Errorf("error reading the earliest next run: %w", err)
	}
	if next == nil {
		return 0, false, nil
	}
	if s.cfg.NowFunc != nil {
		return next.Sub(s.cfg.NowFunc()), true, nil
	}
	return next.Sub(*now), true, nil
}

// fireDue fires every due schedule it can lock, one transaction each, and
// returns the first error after trying them all.
func (s *Scheduler) fireDue(ctx context.Context) error {
	failed := []string{}
	var firstErr error
	for {
		name, err := s.fireOne(ctx, failed)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.stats.errors.Add(1)
			s.logger.ErrorContext(ctx, "error firing schedule", "schedule", name, "error", err)
			firstErr = cmp.Or(firstErr, err)
			if name == "" {
				return firstErr
			}
			failed = append(failed, name)
			continue
		}
		if name == "" {
			return firstErr
		}
	}
}

// dueRow is a locked, due schedule.
type dueRow struct {
	name       string
	spec       string
	timezone   string
	kind       string
	args       json.RawMessage
	optsJSON   []byte
	catchUp    CatchUp
	catchUpMax int
	overlap    Overlap
	nextRunAt  time.Time
	lastJobID  *int64
}

// fireOne locks one due schedule (skipping those in skip), inserts its
// jobs and advances it, in one transaction. It returns the schedule's name,
// or "" when nothing was due.
func (s *Scheduler) fireOne(ctx context.Context, skip []string) (string, error) {
	schema := s.client.Schema()
	tx, err := s.client.Pool().Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("error beginning a fire transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	now, err := s.now(ctx, tx)
	if err != nil {
		return "", err
	}

	var r dueRow
	var catchUp, overlap string
	err = tx.QueryRow(ctx, queue.Qualify(schema, claimDueSQL), s.names, skip, now).Scan(
		&r.name, &r.spec, &r.timezone, &r.kind, &r.args, &r.optsJSON, &catchUp, &r.catchUpMax, &overlap, &r.nextRunAt, &r.lastJobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error claiming a due schedule: %w", err)
	}
	r.catchUp, r.overlap = CatchUp(catchUp), Overlap(overlap)

	// The row, not this process's declaration, says what to insert: during a
	// rolling deploy the newest declaration wins on every replica.
	spec, err := ParseSpec(r.spec, r.timezone)
	if err != nil {
		return r.name, fmt.Errorf("stored spec of schedule %q: %w", r.name, err)
	}
	var opts InsertOpts
	if err := json.Unmarshal(r.optsJSON, &opts); err != nil {
		return r.name, fmt.Errorf("stored insert options of schedule %q: %w", r.name, err)
	}

	plan := planFires(spec, r, now, s.cfg.MisfireGrace)
	if len(plan.fire) > 0 && r.overlap == OverlapSkip {
		isBusy, err := jobBusy(ctx, tx, schema, r.lastJobID)
		if err != nil {
			return r.name, err
		}
		if isBusy {
			plan.skippedOverlap += int64(len(plan.fire))
			plan.fire = nil
		}
	}

	var lastRun *time.Time
	lastJob := r.lastJobID
	var inserted, duplicates int64
	for _, at := range plan.fire {
		id, dup, err := insertFire(ctx, s.client, tx, fireJob{
			schedule: r.name, kind: r.kind, args: r.args, opts: opts,
			fireAt: at, missed: plan.folded, firedBy: s.cfg.ID,
		})
		if err != nil {
			return r.name, err
		}
		at := at
		lastRun, lastJob = &at, &id
		if dup {
			duplicates++
			continue
		}
		inserted++
	}
	outcome := plan.outcome(inserted, duplicates)
	skipped := plan.skippedCatchUp + plan.skippedOverlap
	_, err = tx.Exec(ctx, queue.Qualify(schema, recordFireSQL),
		r.name, plan.next, lastRun, lastJob, outcome, inserted, skipped, now)
	if err != nil {
		return r.name, fmt.Errorf("error advancing schedule %q: %w", r.name, err)
	}
	if s.cfg.Test.BeforeCommitFunc != nil {
		s.cfg.Test.BeforeCommitFunc(ctx, r.name, plan.fire)
	}
	if err := tx.Commit(ctx); err != nil {
		return r.name, fmt.Errorf("error committing the fire of schedule %q: %w", r.name, err)
	}

	s.stats.fired.Add(inserted)
	s.stats.duplicates.Add(duplicates)
	s.stats.skippedCatchUp.Add(plan.skippedCatchUp)
	s.stats.skippedOverlap.Add(plan.skippedOverlap)
	attrs := []any{"schedule", r.name, "kind", r.kind, "outcome", outcome, "inserted", inserted, "next_run_at", plan.next}
	if lastJob != nil {
		attrs = append(attrs, "job_id", *lastJob)
	}
	switch {
	case plan.skippedCatchUp > 0:
		s.logger.WarnContext(ctx, "schedule missed fire times while no scheduler ran",
			append(attrs, "missed", plan.missed, "missed_exact", plan.exact, "dropped", plan.skippedCatchUp, "policy", string(r.catchUp))...)
	case plan.skippedOverlap > 0:
		s.logger.InfoContext(ctx, "schedule fire skipped: previous job still unfinished", append(attrs, "previous_job_id", *r.lastJobID)...)
	case duplicates > 0:
		s.logger.WarnContext(ctx, "schedule fire already had a job; not inserting another", attrs...)
	default:
		s.logger.DebugContext(ctx, "schedule fired", attrs...)
	}
	return r.name, nil
}

// firePlan is what the catch-up policy makes of the due fire times.
type firePlan struct {
	fire           []time.Time // fire times to insert, ascending
	next           time.Time   // new next_run_at
	missed         int64       // due fire times beyond the first (a lower bound when !exact)
	exact          bool
	folded         int64 // fire times represented by the one CatchUpOnce job
	skippedCatchUp int64
	skippedOverlap int64
}

func (p *firePlan) outcome(inserted, duplicates int64) string {
	switch {
	case inserted > 0:
		return "inserted"
	case duplicates > 0:
		return "duplicate"
	case p.skippedOverlap > 0:
		return "skipped_overlap"
	default:
		return "skipped_catch_up"
	}
}

// planFires applies the catch-up policy to the fire times due at now.
func planFires(spec *Spec, r dueRow, now time.Time, grace time.Duration) firePlan {
	keep := 1
	if r.catchUp == CatchUpEach {
		keep = r.catchUpMax
	}
	count, exact, last, next := spec.dueFires(r.nextRunAt, now, keep)
	if next.IsZero() {
		// The spec never fires again: park it far away rather than loop.
		next = now.AddDate(100, 0, 0)
	}
	p := firePlan{next: next, exact: exact}
	if count == 0 {
		return p
	}
	p.missed = count - 1
	newest := last[len(last)-1]
	switch r.catchUp {
	case CatchUpSkip:
		if now.Sub(newest) <= grace {
			p.fire = []time.Time{newest}
			p.skippedCatchUp = count - 1
		} else {
			p.skippedCatchUp = count
		}
	case CatchUpEach:
		p.fire = last
		p.skippedCatchUp = count - int64(len(last))
	default: // CatchUpOnce
		p.fire = []time.Time{newest}
		p.folded = count - 1
	}
	return p
}

// Stats are the scheduler's counters since it was created.
type Stats struct {
	Fired          int64 `json:"fired"`            // jobs inserted by fires
	SkippedCatchUp int64 `json:"skipped_catch_up"` // missed fire times dropped by the catch-up policy
	SkippedOverlap int64 `json:"skipped_overlap"`  // fire times dropped because the previous job was unfinished
	Duplicates     int64 `json:"duplicates"`       // fire times that already had a job
	Errors         int64 `json:"errors"`           // failed fire attempts (retried)
	Orphaned       int64 `json:"orphaned"`         // schedules in the table not declared here, at start
}

type counters struct {
	fired, skippedCatchUp, skippedOverlap, duplicates, errors, orphaned atomic.Int64
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	return Stats{
		Fired:          s.stats.fired.Load(),
		SkippedCatchUp: s.stats.skippedCatchUp.Load(),
		SkippedOverlap: s.stats.skippedOverlap.Load(),
		Duplicates:     s.stats.duplicates.Load(),
		Errors:         s.stats.errors.Load(),
		Orphaned:       s.stats.orphaned.Load(),
	}
}
