package events

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// Forwarder defaults.
const (
	ForwardClaimSizeDefault       = 500
	ForwardMaxClaimGrowth         = 4
	ForwardSweepIntervalDefault   = time.Second
	ForwardPollIntervalDefault    = 10 * time.Millisecond
	ForwardConcurrencyDefault     = 2
	StaleClaimAfterDefault        = 5 * time.Minute
	ForwardMaxRetriesDefault      = 10
	ForwardRetryBackoffMinDefault = time.Second
	ForwardRetryBackoffMaxDefault = 5 * time.Minute
	ForwardPublishTimeoutDefault  = 30 * time.Second
)

// releaseTimeout bounds the statement that returns a stopping forwarder's
// claims to PENDING once Stop's own deadline has passed.
const releaseTimeout = 2 * time.Second

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	// Schema holds tributary's tables. Defaults to "public".
	Schema string

	// Logger for the forwarder. Defaults to slog.Default().
	Logger *slog.Logger

	// Publishers are the destinations of every event; a row is SENT when
	// each of them has it. Required; their names (Name()) must differ, as
	// they are what a row records (delivered_to) of the destinations that
	// already have it, so a retry goes only to the others. Publishers that
	// implement TxPublisher get each row in the transaction that claims it;
	// the others (plain publishers) afterwards, each under PublishTimeout.
	// A plain publisher that implements outbox.EventPublisher has an outcome per
	// event; any other plain publisher's error counts for all the events of
	// its call.
	Publishers []outbox.Publisher

	// ID names this forwarder in claimed_by. It should be the id of the
	// worker process's tributary_process row (the River client id, which
	// Install uses): the stale-claim reset then returns the claims of a
	// process whose heartbeat stopped after LivenessTimeout rather than
	// StaleClaimAfter. Defaults to host-pid-random.
	ID string

	// ClaimSize is the most rows one claim takes (the rows the forwarder
	// publishes together) while there is no backlog. Defaults to 500.
	ClaimSize int

	// MaxClaimSize is the most rows one claim takes under a backlog of
	// ordered events. After a full claim (as many candidates as it asked
	// for, some of them sent) whose rows average fewer than 8 an aggregate,
	// the next claim of that forward loop asks for twice as many, up to
	// MaxClaimSize, while the claim's payloads, doubled, stay under 16 MiB;
	// the first claim that is not full asks for ClaimSize again.
	// Forwarding an ordered event costs a share of what each claim does per
	// aggregate (its lock, its ordering guard, the Bus's read and
	// reservation of the lanes), and over many aggregates a claim of
	// ClaimSize holds one or two events of each. Defaults to
	// ForwardMaxClaimGrowth times ClaimSize; ClaimSize keeps every claim at
	// ClaimSize.
	MaxClaimSize int

	// SweepInterval is how often the forwarder looks for rows without being
	// notified, and how often it resets stale claims (on a timer of its
	// own, whatever the load). A lost notification delays events by at
	// most this much.
	//
	// Defaults to 1 second.
	SweepInterval time.Duration

	// PollInterval is how soon the forwarder looks again after a batch that
	// sent rows, without a notification; the wait doubles up to
	// SweepInterval while nothing is sent. It is what delivers events
	// emitted without NOTIFY (EmitterConfig.NoNotify) quickly under load.
	//
	// Defaults to 10 ms.
	PollInterval time.Duration

	// StaleClaimAfter is how long a row may stay CLAIMED before the sweep
	// returns it to PENDING whoever claimed it. It is the cut-off for
	// claims whose claimed_by has no tributary_process row, and a backstop
	// for the others; it must be longer than a batch's publishing can take
	// (PublishTimeout for each plain publisher).
	//
	// Defaults to 5 minutes.
	StaleClaimAfter time.Duration

	// LivenessTimeout is how old the heartbeat of the tributary_process
	// row named by claimed_by must be before the sweep takes that
	// process for dead and returns its claims to PENDING (the judgement is
	// queue.StaleProcesses', on the database clock). Install sets the
	// runtime's.
	//
	// Defaults to queue.LivenessTimeoutDefault (30 seconds).
	LivenessTimeout time.Duration

	// MaxRetries is how many failed forwarding attempts turn a row FAILED.
	//
	// Defaults to 10.
	MaxRetries int

	// RetryBackoffMin and RetryBackoffMax bound the wait before a failed
	// row is tried again: RetryBackoffMin after the first failure, doubling
	// with each further one, at most RetryBackoffMax. While a row waits,
	// the later rows of its aggregate wait too (their order is kept); other
	// rows do not.
	//
	// Default to 1 second and 5 minutes.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration

	// PublishTimeout bounds one plain publisher's part of a batch (all its
	// calls for the batch), so a broker that stops confirming (flow
	// control, a hung connection) cannot pin the forwarder: the events it
	// did not confirm in time count as failed for it and are retried.
	//
	// Defaults to 30 seconds.
	PublishTimeout time.Duration

	// Concurrency is how many batches the forwarder works on at once. They
	// claim disjoint rows (SKIP LOCKED) and keep per-aggregate order the
	// same way separate forwarders do.
	//
	// Defaults to 2.
	Concurrency int

	// AfterClaimFunc, when set, runs after each claim commits and before
	// the batch is published. Tests use it to stop a forwarder between the
	// two, as a crash would.
	AfterClaimFunc func(ctx context.Context, events []outbox.Event) error
}

// ForwarderStats are a forwarder's counters since it was created.
type ForwarderStats struct {
	// Batches counts claims that took rows.
	Batches int64 `json:"batches"`
	// Forwarded counts rows marked SENT.
	Forwarded int64 `json:"forwarded"`
	// Failures counts failed attempts recorded on rows.
	Failures int64 `json:"failures"`
	// StaleResets counts CLAIMED rows the sweep returned to PENDING.
	StaleResets int64 `json:"stale_resets"`
	// Claims counts claim transactions, EmptyClaims those that took
	// nothing: their rate while nothing is claimable shows that the
	// forwarder waits rather than spins.
	Claims      int64 `json:"claims"`
	EmptyClaims int64 `json:"empty_claims"`
	// LargestClaim is the most rows one claim took (see MaxClaimSize).
	LargestClaim int64 `json:"largest_claim"`
}

// Forwarder moves outbox rows to publishers: PENDING -> CLAIMED -> SENT
// (or back to PENDING after a backoff, and FAILED after MaxRetries). Run
// one per worker process; any number of forwarders share an outbox safely.
// It is a queue.Service.
type Forwarder struct {
	pool   *pgxpool.Pool
	cfg    ForwarderConfig
	logger *slog.Logger
	lockNS string
	token  string // names this forwarder's wakes of the others (wakeFromPrefix)

	oneTx     bool
	txPubs    []outbox.TxPublisher
	plainPubs []outbox.Publisher
	names     []string // every publisher's name

	claimUpdateSQL, claimSentSQL, deliveredSQL      string
	finishSQL, failPendingSQL, staleSQL, releaseSQL string
	channel                                         string

	// claimSelect is claimSelectSQL for each scope kind (claimScope.kind).
	claimSelect [claimScopeKinds]string

	batches, forwarded, failures, staleResets, claims, emptyClaims atomic.Int64
	largestClaim                                                   atomic.Int64

	// inflight holds every claim of this forwarder from before its
	// transaction begins until its outcome is recorded: nil while it is
	// being claimed and published, the outcome when recording it failed
	// (the database went away) and the sweep is to record it again. A row
	// CLAIMED under this forwarder's id by no claim in it was lost (its
	// commit seemed to fail) and is reset by the sweep.
	inflightMu sync.Mutex
	inflight   map[*claim][]eventOutcome

	life queue.Lifecycle
}

// NewForwarder returns a forwarder on pool.
func NewForwarder(pool *pgxpool.Pool, cfg ForwarderConfig) (*Forwarder, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	if len(cfg.Publishers) == 0 {
		return nil, errors.New("events: a forwarder needs at least one publisher")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.ID = cmp.Or(cfg.ID, defaultForwarderID())
	cfg.ClaimSize = cmp.Or(cfg.ClaimSize, ForwardClaimSizeDefault)
	if cfg.MaxClaimSize == 0 && cfg.ClaimSize > 0 {
		cfg.MaxClaimSize = cfg.ClaimSize * ForwardMaxClaimGrowth
	}
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, ForwardSweepIntervalDefault)
	cfg.StaleClaimAfter = cmp.Or(cfg.StaleClaimAfter, StaleClaimAfterDefault)
	cfg.LivenessTimeout = cmp.Or(cfg.LivenessTimeout, queue.LivenessTimeoutDefault)
	cfg.PollInterval = min(cmp.Or(cfg.PollInterval, ForwardPollIntervalDefault), cfg.SweepInterval)
	cfg.MaxRetries = cmp.Or(cfg.MaxRetries, ForwardMaxRetriesDefault)
	cfg.RetryBackoffMin = cmp.Or(cfg.RetryBackoffMin, ForwardRetryBackoffMinDefault)
	cfg.RetryBackoffMax = max(cmp.Or(cfg.RetryBackoffMax, ForwardRetryBackoffMaxDefault), cfg.RetryBackoffMin)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, ForwardPublishTimeoutDefault)
	cfg.Concurrency = max(cmp.Or(cfg.Concurrency, ForwardConcurrencyDefault), 1)
	for name, v := range map[string]time.Duration{
		"SweepInterval": cfg.SweepInterval, "PollInterval": cfg.PollInterval, "StaleClaimAfter": cfg.StaleClaimAfter,
		"LivenessTimeout": cfg.LivenessTimeout, "RetryBackoffMin": cfg.RetryBackoffMin, "PublishTimeout": cfg.PublishTimeout,
	} {
		if v < 0 {
			return nil, fmt.Errorf("events: forwarder %s %s must not be negative", name, v)
		}
	}
	if cfg.ClaimSize < 1 || cfg.MaxRetries < 1 {
		return nil, fmt.Errorf("events: forwarder ClaimSize %d and MaxRetries %d must be at least 1", cfg.ClaimSize, cfg.MaxRetries)
	}
	if cfg.MaxClaimSize < cfg.ClaimSize {
		return nil, fmt.Errorf("events: forwarder MaxClaimSize %d must be at least ClaimSize %d", cfg.MaxClaimSize, cfg.ClaimSize)
	}
	f := &Forwarder{
		pool:     pool,
		cfg:      cfg,
		logger:   cfg.Logger.With("component", "forwarder", "forwarder_id", cfg.ID),
		lockNS:   "tributary.outbox." + cfg.Schema + ":",
		channel:  notifyChannel(cfg.Schema),
		token:    randomToken(),
		inflight: map[*claim][]eventOutcome{},
	}
	seen := map[string]bool{}
	for _, p := range cfg.Publishers {
		if p == nil {
			return nil, errors.New("events: a forwarder publisher is nil")
		}
		name := p.Name()
		if seen[name] {
			return nil, fmt.Errorf("events: two forwarder publishers are named %q; each destination needs its own name", name)
		}
		seen[name] = true
		f.names = append(f.names, name)
		if tp, ok := p.(outbox.TxPublisher); ok {
			f.txPubs = append(f.txPubs, tp)
		} else {
			f.plainPubs = append(f.plainPubs, p)
		}
	}
	f.oneTx = len(f.plainPubs) == 0 && cfg.AfterClaimFunc == nil
	q := func(s string) string { return queue.Qualify(cfg.Schema, s) }
	for k, pred := range claimScopeSQL {
		f.claimSelect[k] = q(strings.Replace(claimSelectSQL, "/*scope*/", pred, 1))
	}
	f.claimUpdateSQL, f.claimSentSQL = q(claimUpdateSQL), q(claimSentSQL)
	f.deliveredSQL, f.finishSQL, f.failPendingSQL = q(deliveredSQL), q(finishSQL), q(failPendingSQL)
	f.staleSQL, f.releaseSQL = q(staleSQL), q(releaseSQL)
	return f, nil
}

func defaultForwarderID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "host"), os.Getpid(), randomToken())
}

func randomToken() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Name implements queue.Service.
func (f *Forwarder) Name() string { return "outbox forwarder" }

// ID returns the forwarder's claimed_by name.
func (f *Forwarder) ID() string { return f.cfg.ID }

// Stats returns the forwarder's counters.
func (f *Forwarder) Stats() ForwarderStats {
	return ForwarderStats{
		Batches: f.batches.Load(), Forwarded: f.forwarded.Load(), Failures: f.failures.Load(), StaleResets: f.staleResets.Load(),
		Claims: f.claims.Load(), EmptyClaims: f.emptyClaims.Load(), LargestClaim: f.largestClaim.Load(),
	}
}

// Start opens the LISTEN connection and starts forwarding. It returns once
// the forwarder listens, so no notification after Start is missed.
func (f *Forwarder) Start(ctx context.Context) error {
	return f.life.Start(ctx, f.Name(), func(run *queue.Run) error {
		conn, err := f.listen(ctx)
		if err != nil {
			return err
		}
		// The loops stop claiming when the stop begins; the batches in hand
		// are abandoned only when the stop's deadline passes (run.Context).
		loopCtx, workCtx := run.Stopping(), run.Context()
		wakes := make([]chan struct{}, f.cfg.Concurrency)
		for i := range wakes {
			wakes[i] = make(chan struct{}, 1)
			sc := claimScope{share: i, shares: len(wakes)}
			run.Go(func() { f.forwardLoop(loopCtx, workCtx, wakes[i], sc) })
		}
		run.Go(func() { f.listenLoop(loopCtx, conn, wakes) })
		run.Go(func() { f.sweepLoop(loopCtx) })
		f.logger.InfoContext(ctx, "forwarder started", "claim_size", f.cfg.ClaimSize, "max_claim_size", f.cfg.MaxClaimSize, "publishers", len(f.cfg.Publishers))
		return nil
	})
}

// Stop stops claiming and waits for the batches being published, or until
// ctx is done: then their publishing is abandoned and their rows, still
// CLAIMED by this forwarder, are returned to PENDING at once (with a short
// timeout of their own; if that fails too, the stale-claim reset returns
// them later). A destination may then get such an event a second time.
func (f *Forwarder) Stop(ctx context.Context) error {
	stopped, err := f.life.Stop(ctx)
	if !stopped {
		return nil
	}
	if err == nil {
		// Outcomes that failed to record get one more try; rows still
		// claimed after it go back to PENDING rather than wait, claimed
		// by a process that is gone, for StaleClaimAfter.
		f.recordAgain(ctx)
		if released, err := f.releaseInflight(); err != nil || released > 0 {
			f.logger.WarnContext(ctx, "forwarder stopped with outcomes it could not record; their rows were returned to PENDING", "rows", released, "error", err)
		}
		f.logger.InfoContext(ctx, "forwarder stopped")
		return nil
	}
	released, rerr := f.releaseInflight()
	f.logger.Warn("forwarder stopped past its deadline; released its claims", "count", released)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return fmt.Errorf("%w; released %d claimed rows", err, released)
}

// newClaim starts a claim: its claimed_at is taken and the claim tracked
// under one lock, so a sweep that read the tracked claims earlier
// (ownClaims) also saw an earlier claimed_at than this one.
func (f *Forwarder) newClaim() *claim {
	f.inflightMu.Lock()
	defer f.inflightMu.Unlock()
	c := &claim{claimedAt: time.Now().UTC().Truncate(time.Microsecond)}
	f.inflight[c] = nil
	return c
}

func (f *Forwarder) untrack(c *claim) {
	f.inflightMu.Lock()
	delete(f.inflight, c)
	f.inflightMu.Unlock()
}

// keepUnrecorded keeps a claim whose outcome could not be recorded, for
// the sweep to record again (recordAgain).
func (f *Forwarder) keepUnrecorded(c *claim, outcomes []eventOutcome) {
	f.inflightMu.Lock()
	f.inflight[c] = outcomes
	f.inflightMu.Unlock()
}

// ownClaims returns the claimed_at of every claim of this forwarder, and
// the time before which every other row CLAIMED under its id was lost.
func (f *Forwarder) ownClaims() (known []time.Time, lostBefore time.Time) {
	f.inflightMu.Lock()
	defer f.inflightMu.Unlock()
	for c := range f.inflight {
		known = append(known, c.claimedAt)
	}
	return known, time.Now().UTC().Truncate(time.Microsecond)
}

// recordAgain records the outcomes that could not be recorded when their
// batch ended. They stay claimed by this (live) forwarder meanwhile, so no
// other forwarder publishes them again; one older than StaleClaimAfter is
// let go, for the stale-claim reset to return to PENDING.
func (f *Forwarder) recordAgain(ctx context.Context) {
	f.inflightMu.Lock()
	pending := map[*claim][]eventOutcome{}
	for c, o := range f.inflight {
		if o != nil {
			pending[c] = o
		}
	}
	f.inflightMu.Unlock()
	for c, o := range pending {
		sent, err := f.finish(ctx, ctx, c, o)
		switch {
		case !errors.Is(err, errNotRecorded):
			f.untrack(c)
			f.logger.InfoContext(ctx, "recorded a batch's outcome that had failed to record", "events", len(c.events), "sent", sent)
		case time.Since(c.claimedAt) > f.cfg.StaleClaimAfter:
			f.untrack(c)
			f.logger.WarnContext(ctx, "giving up recording a batch's outcome; the stale-claim reset returns its rows", "events", len(c.events), "error", err)
		case ctx.Err() == nil:
			f.logger.WarnContext(ctx, "recording a batch's outcome failed again, will retry", "events", len(c.events), "error", err)
		}
	}
}

// releaseInflight returns the rows of every claim still being published to
// PENDING, guarded by claimed_by and claimed_at so a claim that finished
// (or was reset and re-taken) meanwhile is left alone.
func (f *Forwarder) releaseInflight() (int64, error) {
	f.inflightMu.Lock()
	claims := make([]*claim, 0, len(f.inflight))
	for c := range f.inflight {
		claims = append(claims, c)
	}
	f.inflightMu.Unlock()
	if len(claims) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var total int64
	for _, c := range claims {
		ids := make([]string, len(c.events))
		for i, e := range c.events {
			ids[i] = e.ID
		}
		tag, err := f.pool.Exec(ctx, f.releaseSQL, customPlan, ids, f.cfg.ID, c.claimedAt)
		if err != nil {
			return total, fmt.Errorf("error releasing the forwarder's claims: %w", err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// listen opens a dedicated connection (not from the pool, which would lose
// it to other users) and subscribes to the outbox channel.
func (f *Forwarder) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, f.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("error opening the forwarder's LISTEN connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("error listening on %s: %w", f.channel, err)
	}
	return conn, nil
}

func (f *Forwarder) listenLoop(ctx context.Context, conn *pgx.Conn, wakes []chan struct{}) {
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
			if conn, err = f.listen(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				f.logger.WarnContext(ctx, "forwarder cannot listen, relying on the sweep", "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(f.cfg.SweepInterval):
				}
				continue
			}
			signal(wakes) // notifications may have been missed while down
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.logger.WarnContext(ctx, "forwarder lost its LISTEN connection, reconnecting", "error", err)
			closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn.Close(closeCtx)
			cancel()
			conn = nil
			continue
		}
		switch loop, all, none := wakeLoops(n.Payload, f.token, len(wakes)); {
		case none:
		case all:
			signal(wakes)
		default:
			signal(wakes[loop : loop+1])
		}
	}
}

func signal(chs []chan struct{}) {
	for _, ch := range chs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// sweepLoop resets stale claims every SweepInterval. It is a loop of its
// own so a backlog that keeps the forward loops busy cannot starve it.
func (f *Forwarder) sweepLoop(ctx context.Context) {
	ticker := time.NewTicker(f.cfg.SweepInterval)
	defer ticker.Stop()
	for {
		f.recordAgain(ctx)
		f.resetStale(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// forwardLoop forwards batches until ctx (claiming) is done; work bounds
// the publishing of the batch in hand.
func (f *Forwarder) forwardLoop(ctx, work context.Context, wake <-chan struct{}, sc claimScope) {
	// Between notifications the forwarder polls: every PollInterval while
	// batches keep sending rows, backing off to SweepInterval otherwise.
	idle := f.cfg.PollInterval
	timer := time.NewTimer(idle)
	defer timer.Stop()
	sc.size = f.cfg.ClaimSize
	for {
		res, err := f.forwardOnce(ctx, work, sc)
		if ctx.Err() != nil {
			return
		}
		sc.size = f.nextClaimSize(sc.size, res)
		if err != nil {
			f.logger.WarnContext(ctx, "forwarding failed, will retry", "error", err)
		}
		// Straight on only after a full batch that made progress: a batch
		// that sent nothing (all failed, or nothing claimable) waits, so a
		// blocked backlog or a broker that is down costs a few claims a
		// second, not a busy loop.
		if res.more() {
			continue
		}
		if res.sent > 0 {
			idle = f.cfg.PollInterval
		} else {
			idle = min(idle*2, f.cfg.SweepInterval)
		}
		timer.Reset(idle)
		select {
		case <-ctx.Done():
			return
		case <-wake:
			idle = f.cfg.PollInterval
		case <-timer.C:
		}
	}
}

// resetStale returns CLAIMED rows to PENDING whose forwarder is taken for
// dead (claimed_by names a tributary_process row whose heartbeat is older
// than LivenessTimeout), whose claim is older than StaleClaimAfter, or
// that this forwarder claimed in a transaction it saw fail (so it is not
// working on them) though the commit went through. The forwarder runs it
// every SweepInterval.
func (f *Forwarder) resetStale(ctx context.Context) {
	known, lostBefore := f.ownClaims()
	staleBefore := time.Now().Add(-f.cfg.StaleClaimAfter)
	dead, err := queue.StaleProcesses(ctx, f.pool, f.cfg.Schema, f.cfg.LivenessTimeout)
	if err != nil {
		if ctx.Err() == nil {
			f.logger.WarnContext(ctx, "error resetting stale outbox claims", "error", err)
		}
		return
	}
	tag, err := f.pool.Exec(ctx, f.staleSQL, customPlan, staleBefore, dead, f.cfg.ID, lostBefore, known)
	if err != nil {
		if ctx.Err() == nil {
			f.logger.WarnContext(ctx, "error resetting stale outbox claims", "error", err)
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		f.staleResets.Add(n)
		f.logger.WarnContext(ctx, "reset stale outbox claims", "count", n, "claimed_before", staleBefore, "dead_processes", dead)
	}
}

// claim is one committed claim: the rows now CLAIMED by this forwarder.
type claim struct {
	events    []claimedEvent
	claimedAt time.Time
	selected  int
}

// claimedEvent is a claimed row: the event and what the forwarder needs to
// know about its delivery so far.
type claimedEvent struct {
	outbox.Event
	position  int64
	retries   int
	delivered []string // destinations that have it
}

func (e *claimedEvent) deliveredTo(name string) bool { return slices.Contains(e.delivered, name) }

// batchResult is what one forwarding round did.
type batchResult struct {
	selected, claimed, sent int
	batchSize               int
	// aggregates and bytes are the claimed events' distinct aggregates and
	// the size of their payloads (roundShape).
	aggregates, bytes int
}

// Growing claims (ForwarderConfig.MaxClaimSize): a full claim grows the
// next one while its rows average fewer than claimGrowRowsPerAggregate an
// aggregate and its events' payloads, doubled, stay under claimGrowBytes,
// so that a round's memory stays near what a claim of ClaimSize small
// events holds.
const (
	claimGrowRowsPerAggregate = 8
	claimGrowBytes            = 16 << 20
)

// nextClaimSize is the size a forward loop's next claim asks for after a
// claim of size that did res (see ForwarderConfig.MaxClaimSize). Over
// 1,000 aggregates a claim of 1,000 holds one or two events of each, and
// claims growing to 4,000 forwarded and handled 6 to 10 % more ordered
// events a second in bench events (docs/BENCHMARKS.md, "The eighteenth
// round"); over 10 or 100 aggregates, whose claims already hold dozens of
// events of each, larger claims were not faster, and there they do not
// grow.
func (f *Forwarder) nextClaimSize(size int, res batchResult) int {
	if !res.more() {
		return f.cfg.ClaimSize
	}
	if res.aggregates*claimGrowRowsPerAggregate > res.claimed && res.bytes*2 <= claimGrowBytes {
		return min(size*2, f.cfg.MaxClaimSize)
	}
	return size
}

// roundShape returns the distinct aggregates of evs and the bytes of their
// payloads, for nextClaimSize.
func roundShape(evs []claimedEvent) (aggregates, bytes int) {
	for i := range evs {
		bytes += len(evs[i].Payload)
	}
	return len(distinctAggregates(evs, func(e *claimedEvent) string { return e.AggregateID })), bytes
}

// more reports that the round sent rows out of a full set of candidates,
// so more rows are probably waiting.
func (r batchResult) more() bool { return r.sent > 0 && r.selected >= r.batchSize }

func (r *batchResult) add(o batchResult) {
	r.selected += o.selected
	r.claimed += o.claimed
	r.sent += o.sent
}

// txPublishError is a transactional publisher's error for a claim: the
// claim's transaction rolled back, nothing of it was written.
type txPublishError struct {
	publisher string
	ids       []string // the claim's events, in emit order
	retries   []int    // their retry counts when claimed
	err       error
}

func (e *txPublishError) Error() string { return fmt.Sprintf("publisher %s: %v", e.publisher, e.err) }
func (e *txPublishError) Unwrap() error { return e.err }

// forwardOnce is one round, claiming within sc. A transactional publisher's error rolls the whole claim back; the
// round then forwards its events one at a time, so only an event the
// publisher still refuses alone records the failure.
func (f *Forwarder) forwardOnce(ctx, work context.Context, sc claimScope) (batchResult, error) {
	var res batchResult
	var err error
	if f.oneTx {
		res, err = f.forwardInOneTx(ctx, sc)
	} else {
		res, err = f.forwardClaimed(ctx, work, sc)
	}
	res.batchSize = sc.claimSize(f.cfg.ClaimSize)
	var pe *txPublishError
	if !errors.As(err, &pe) || ctx.Err() != nil {
		return res, err
	}
	if len(pe.ids) == 1 {
		if ferr := f.failPending(ctx, pe.ids[0], pe.retries[0], pe); ferr != nil {
			return res, errors.Join(err, ferr)
		}
		return res, err
	}
	f.logger.WarnContext(ctx, "a transactional publisher refused a batch; forwarding its events one at a time", "count", len(pe.ids), "error", err)
	var errs []error
	for _, id := range pe.ids {
		r, err := f.forwardOnce(ctx, work, claimScope{only: []string{id}})
		res.add(r)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res, errors.Join(errs...)
}

// failPending records a transactional publisher's refusal of one event on
// its row, which is still PENDING (the claim rolled back).
func (f *Forwarder) failPending(ctx context.Context, id string, retries int, cause error) error {
	now := time.Now().UTC()
	var status string
	err := f.pool.QueryRow(context.WithoutCancel(ctx), f.failPendingSQL, customPlan, id, cause.Error(), f.cfg.MaxRetries, now,
		f.retryAt(now, retries), retries).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // another forwarder got to the row meanwhile
	}
	if err != nil {
		return fmt.Errorf("error recording the forwarding failure of event %s: %w", id, err)
	}
	f.failures.Add(1)
	if status == StatusFailed {
		f.logger.ErrorContext(ctx, "outbox event FAILED: retries used up", "event_id", id, "error", cause)
	}
	return nil
}

// forwardInOneTx is a round when every publisher is transactional: claim,
// publish and SENT in one transaction, one commit. The rows are never
// visibly CLAIMED; a crash rolls everything back and leaves them PENDING.
// The commit and the notifications that announce it (River's wake for the
// dispatch jobs, the other forwarders' wake) go out in one round trip
// (commitNotifying).
func (f *Forwarder) forwardInOneTx(ctx context.Context, sc claimScope) (batchResult, error) {
	var res batchResult
	var wakeOthers bool
	var after afterTx
	now := time.Now().UTC().Truncate(time.Microsecond)
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("error acquiring a connection to claim outbox rows: %w", err)
	}
	// Released in a transaction (a commit whose outcome is unknown), the
	// pool closes the connection.
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, claimTxOptions(sc))
	if err != nil {
		return res, fmt.Errorf("error beginning a claim: %w", err)
	}
	err = func() error {
		b, candidates, err := f.selectClaim(ctx, tx, now, sc)
		if err != nil {
			return fmt.Errorf("error claiming outbox rows: %w", err)
		}
		res.selected = candidates
		if len(b.ids) == 0 {
			return nil
		}
		// The SENT mark and the transactional publishers' first reads go
		// out in one round trip (see txStarter). The mark runs with its
		// generic plan; a publisher that starts here (the Bus) sets the
		// plans of what follows itself, so claimRestSQL goes out only
		// where none does.
		var claimed []claimedEvent
		batch := &pgx.Batch{}
		batch.Queue(f.claimSentSQL, b.updateArgs(f.cfg.ID, now)...).Query(func(rows pgx.Rows) error {
			var err error
			claimed, err = pgx.CollectRows(rows, scanEvent)
			return err
		})
		started := f.queueStarts(batch, b.aggregates())
		if len(started) == 0 {
			batch.Queue(claimRestSQL)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("error marking outbox rows sent: %w", err)
		}
		sortByPosition(claimed)
		if after, err = f.publishTx(ctx, tx, claimed, false, started); err != nil {
			return err
		}
		res.claimed, res.sent = len(claimed), len(claimed)
		res.aggregates, res.bytes = roundShape(claimed)
		for _, e := range claimed {
			wakeOthers = wakeOthers || e.AggregateID != ""
		}
		return nil
	}()
	if err != nil {
		_ = tx.Rollback(ctx)
	} else {
		notices := after.notices
		if wakeOthers {
			notices = append(notices, f.wakeNotice())
		}
		var noticeErr error
		noticeErr, err = commitNotifying(ctx, conn.Conn(), notices)
		if noticeErr != nil {
			// The rows are there; River's poll and the forwarders' find
			// them without the nudge.
			f.logger.WarnContext(ctx, "error sending the notifications of a forwarded batch", "error", noticeErr)
		}
	}
	f.countClaim(err == nil, res.claimed)
	if err != nil {
		// Nothing was written; the rows are PENDING as before.
		return batchResult{selected: res.selected}, err
	}
	if res.sent > 0 {
		for _, h := range after.hooks {
			h(ctx)
		}
		f.batches.Add(1)
		f.forwarded.Add(int64(res.sent))
		f.logger.DebugContext(ctx, "forwarded events", "count", res.sent)
	}
	return res, nil
}

// countClaim counts a claim transaction that took n rows, or that failed
// (!ok).
func (f *Forwarder) countClaim(ok bool, n int) {
	f.claims.Add(1)
	if !ok || n == 0 {
		f.emptyClaims.Add(1)
		return
	}
	for {
		largest := f.largestClaim.Load()
		if int64(n) <= largest || f.largestClaim.CompareAndSwap(largest, int64(n)) {
			return
		}
	}
}

// txStarter is a transactional publisher (the Bus) whose publish begins
// with reads that need only the events' aggregates: queueStart queues them
// on the batch that marks the claimed rows SENT and returns the publish
// that uses their results once the batch was sent. On a busy machine each
// round trip of the claim's transaction costs about a millisecond of every
// ordered event's latency (docs/BENCHMARKS.md, "Ordered events: the latency
// path").
type txStarter interface {
	queueStart(b *pgx.Batch, aggregates []string) startedPublish
}

// txPublishFunc is outbox.TxPublisher's PublishOutboxTx.
type txPublishFunc func(ctx context.Context, tx pgx.Tx, events []outbox.Event) (func(context.Context), error)

// startedPublish is a txStarter's publish: PublishOutboxTx, whose work
// after the commit is notifications, which the forwarder sends with its
// own in one statement (sendNotices).
type startedPublish func(ctx context.Context, tx pgx.Tx, events []outbox.Event) ([]notice, error)

// queueStarts queues the first reads of every transactional publisher that
// is a txStarter on b, for the events of aggregates, and returns their
// publishes by publisher, for publishTx.
func (f *Forwarder) queueStarts(b *pgx.Batch, aggregates []string) map[string]startedPublish {
	started := map[string]startedPublish{}
	for _, p := range f.txPubs {
		if s, ok := p.(txStarter); ok {
			started[p.Name()] = s.queueStart(b, aggregates)
		}
	}
	return started
}

// publishTx hands the events to every transactional publisher that does
// not have them yet, in tx, and returns what the publishers want done once
// tx has committed; with record it also notes on each row that the
// publisher has it (for the retries of the plain publishers). A publisher
// in started is published through its started publish (queueStarts).
func (f *Forwarder) publishTx(ctx context.Context, tx pgx.Tx, events []claimedEvent, record bool, started map[string]startedPublish) (afterTx, error) {
	var after afterTx
	// A started publisher (the Bus) set its own plans for the rest of the
	// transaction in the mark's round trip, before any publisher ran; the
	// others are handed it as claimRestSQL leaves it (publishersPlanSQL).
	planned := len(started) > 0
	for _, p := range f.txPubs {
		name := p.Name()
		var evs []outbox.Event
		var idx []int
		for i := range events {
			if !events[i].deliveredTo(name) {
				evs = append(evs, events[i].Event)
				idx = append(idx, i)
			}
		}
		if len(evs) == 0 {
			continue
		}
		var err error
		if publish := started[name]; publish != nil {
			var notices []notice
			notices, err = callStarted(ctx, publish, tx, evs)
			after.notices = append(after.notices, notices...)
		} else {
			if planned {
				if _, err := tx.Exec(ctx, publishersPlanSQL); err != nil {
					return afterTx{}, fmt.Errorf("error planning the transaction for %s: %w", name, err)
				}
				planned = false
			}
			var hook func(context.Context)
			hook, err = callTx(ctx, p.PublishOutboxTx, tx, evs)
			if hook != nil {
				after.hooks = append(after.hooks, hook)
			}
		}
		if err != nil {
			pe := &txPublishError{publisher: name, err: err}
			for _, e := range events {
				pe.ids = append(pe.ids, e.ID)
				pe.retries = append(pe.retries, e.retries)
			}
			return afterTx{}, pe
		}
		if !record {
			continue
		}
		if _, err := tx.Exec(ctx, f.deliveredSQL, customPlan, eventIDs(evs), name); err != nil {
			return afterTx{}, fmt.Errorf("error recording the delivery to %s: %w", name, err)
		}
		for _, i := range idx {
			events[i].delivered = append(events[i].delivered, name)
		}
	}
	return after, nil
}

// callTx calls a transactional publisher, turning a panic into an error.
func callTx(ctx context.Context, publish txPublishFunc, tx pgx.Tx, evs []outbox.Event) (hook func(context.Context), err error) {
	defer func() {
		if r := recover(); r != nil {
			hook, err = nil, fmt.Errorf("publisher panicked: %v", r)
		}
	}()
	return publish(ctx, tx, evs)
}

// callStarted is callTx for a started publish.
func callStarted(ctx context.Context, publish startedPublish, tx pgx.Tx, evs []outbox.Event) (notices []notice, err error) {
	defer func() {
		if r := recover(); r != nil {
			notices, err = nil, fmt.Errorf("publisher panicked: %v", r)
		}
	}()
	return publish(ctx, tx, evs)
}

// afterTx is what the transactional publishers want done once their
// transaction committed: notifications to send and funcs to run.
type afterTx struct {
	notices []notice
	hooks   []func(context.Context)
}

// afterCommit does the transactional publishers' after-commit work, once
// their transaction committed (the claimed round's; forwardInOneTx sends
// the notifications with its commit, commitNotifying).
func (f *Forwarder) afterCommit(ctx context.Context, after afterTx) {
	if err := sendNotices(context.WithoutCancel(ctx), f.pool, after.notices); err != nil {
		// The rows are there; River's poll and the forwarders' find them
		// without the nudge.
		f.logger.WarnContext(ctx, "error sending the notifications of a forwarded batch", "error", err)
	}
	for _, h := range after.hooks {
		h(ctx)
	}
}

// claimScope is what a claim may take: with only, those rows; with shares
// above 1, rows without an aggregate and those of the aggregates in share
// (aggregates split by a hash of their id into shares).
//
// Each forward loop claims its own share. A loop holds the advisory lock of
// every aggregate in its batch until the batch commits, and with many
// aggregates a batch of ClaimSize rows spans nearly all of them: a second
// loop picking from the same rows found them all locked and claimed
// nothing, so ordered events were forwarded one batch at a time however
// many loops ran. With shares the loops work on disjoint aggregates at
// once. Shares only narrow what a loop looks at: the advisory locks and
// the claim's guard still keep an aggregate's rows in position order, one
// batch at a time, across all loops and forwarders (whose shares need not
// agree).
type claimScope struct {
	only          []string
	share, shares int
	// size is the most rows the claim takes; 0: ClaimSize.
	size int
}

// claimSize is the most rows a claim of sc takes, claimSize the
// forwarder's ClaimSize.
func (sc claimScope) claimSize(claimSize int) int { return cmp.Or(sc.size, claimSize) }

// Scope kinds: which variant of claimSelectSQL a claimScope runs.
const (
	claimAll   = iota // every row (one forward loop)
	claimOnly         // the rows of only
	claimShare        // rows without an aggregate and those of share
	claimScopeKinds
)

// claimScopeSQL is the candidates' predicate of each scope kind, and
// args the parameters after claimSelectSQL's first three.
//
// One statement per kind, rather than one with optional parameters
// ("$4 IS NULL OR o.id = ANY($4)"), so that a loop's claim can run with a
// generic plan that fits it (claimTxOptions): a custom plan, made for
// every call, cost more than the claim itself at a few events a round
// (docs/BENCHMARKS.md, "Ordered events: fewer round trips and plans on the
// emit and forward path").
var claimScopeSQL = [claimScopeKinds]string{
	claimAll:   "",
	claimOnly:  "AND o.id = ANY($4::uuid[])",
	claimShare: "AND (o.aggregate_id IS NULL OR " + shareKeySQL("o.aggregate_id") + " % $4::int = $5::int)",
}

func (sc claimScope) kind() int {
	switch {
	case sc.only != nil:
		return claimOnly
	case sc.shares > 1:
		return claimShare
	}
	return claimAll
}

func (sc claimScope) args() []any {
	switch sc.kind() {
	case claimOnly:
		return []any{sc.only}
	case claimShare:
		return []any{sc.shares, sc.share}
	}
	return nil
}

// claimSetupSQL turns bitmap scans off for the rest of a claim's
// transaction: while the outbox has no statistics (a new schema,
// autovacuum behind) Postgres estimates a few hundred PENDING rows and
// picks a bitmap scan of all of them, sorted, over the index scan in
// position order that stops after ClaimSize rows (1.2 s against 44 ms per
// claim of 1,000 over a 100,000-row backlog of 1,000 aggregates, measured
// with EXPLAIN ANALYZE).
const claimSetupSQL = "SET LOCAL enable_bitmapscan = off"

// claimTxOptions begin a claim's transaction of scope sc with
// claimSetupSQL and the candidates' plan settings in the same round trip
// (a statement without arguments goes as a simple query, which may hold
// several): every forward round, empty ones included, begins with it, and
// on a busy machine each round trip a round makes costs about a
// millisecond of an ordered event's latency.
//
// The candidates' select (claimSelectSQL) runs with its generic plan, made
// without sequential scans: its one shape, an index scan of the PENDING
// rows in position order that stops after ClaimSize rows, is the plan
// Postgres makes for it even on an empty outbox, and planned for its
// parameters on every call (a custom plan) it cost 0.27 ms of planning
// against 0.04 ms of execution at a few events a round (docs/BENCHMARKS.md,
// "Ordered events: fewer round trips and plans on the emit and forward
// path"). The claim of the rows of only (claimOnly) is planned for them:
// its generic plan, made on an empty outbox, walks the PENDING index.
// The claim's update (the SENT or CLAIMED mark) follows with the same
// settings, everything after it after claimRestSQL.
func claimTxOptions(sc claimScope) pgx.TxOptions {
	if sc.kind() == claimOnly {
		return pgx.TxOptions{BeginQuery: "BEGIN; " + claimSetupSQL + "; SET LOCAL plan_cache_mode = force_custom_plan"}
	}
	return claimTxOptionsGeneric
}

var claimTxOptionsGeneric = pgx.TxOptions{BeginQuery: "BEGIN; " + claimSetupSQL +
	"; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off"}

// claimRestSQL plans the rest of a claim's transaction for each
// statement's parameters, sequential scans allowed again. It goes in the
// round trip after the candidates' select, after the claim's update
// (claimUpdateSQL, claimSentSQL), so it costs no round trip of its own; in
// the one-transaction round only where no publisher starts in that round
// trip (txStarter): the Bus's start sets generic plans for the rest of the
// transaction (Bus.queueStart), which would override it at once.
//
// The update runs before it, with the generic plan the candidates' settings
// make (no sequential or bitmap scans): every part of it reaches its rows
// through one index whatever the outbox's size (the batch's rows by the
// primary key, the guard's floor by the PENDING and CLAIMED rows' indexes,
// each aggregate's gap by the unfinished rows' index), so its generic plan
// is the plan Postgres makes for it with statistics and without
// (TestClaimUpdateGoesByPrimaryKey, TestClaimGuardFloorGoesByItsIndexes
// explain the generic plan). Planned for its parameters on every call it
// cost 0.75 ms of planning against 0.22 ms of execution a forward round at
// 500 events/s, the largest statement cost of the latency path
// (docs/BENCHMARKS.md, "The sixteenth round").
const claimRestSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_seqscan', 'on', true)`

// publishersPlanSQL is claimRestSQL for the transactional publishers that
// run after a started one (the Bus, whose start sets generic plans without
// sequential scans, hash joins or merge joins: genericPlanSQL): custom
// plans, and the scans and joins as the session has them. Until 2026-12-06
// a user's publisher beside the Bus inherited the Bus's settings
// (TestTxPublishersBesideTheBusKeepThePlanSettings). A round trip, only
// where such a publisher runs after a started one.
const publishersPlanSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config(s.name, s.reset_val, true)
FROM pg_settings s WHERE s.name IN ('enable_seqscan', 'enable_hashjoin', 'enable_mergejoin')`

// claimBatch is what a claim's select locked and may claim: the rows' ids
// with each row's aggregate ("" for none) and position, in emit order.
type claimBatch struct {
	ids, rowAggregates []string
	positions          []int64
}

// aggregates returns the batch's aggregates, each once.
func (b claimBatch) aggregates() []string {
	return distinctAggregates(b.rowAggregates, func(a *string) string { return *a })
}

// updateArgs are the claim updates' arguments (claimUpdateSQL, claimSentSQL):
// the batch claimed by by at at.
func (b claimBatch) updateArgs(by string, at time.Time) []any {
	return []any{b.ids, by, at, b.rowAggregates, b.positions}
}

// selectClaim locks the next PENDING rows of sc that may be tried now and
// returns those this transaction may claim (see claimSelectSQL), and how
// many rows it looked at. tx must have begun with claimTxOptions(sc).
func (f *Forwarder) selectClaim(ctx context.Context, tx pgx.Tx, now time.Time, sc claimScope) (b claimBatch, candidates int, err error) {
	rows, err := tx.Query(ctx, f.claimSelect[sc.kind()], append([]any{sc.claimSize(f.cfg.ClaimSize), f.lockNS, now}, sc.args()...)...)
	if err != nil {
		return b, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, aggregate string
		var position int64
		var mine bool
		if err := rows.Scan(&id, &aggregate, &position, &mine); err != nil {
			return claimBatch{}, 0, err
		}
		candidates++
		if !mine {
			continue
		}
		b.ids = append(b.ids, id)
		b.rowAggregates = append(b.rowAggregates, aggregate)
		b.positions = append(b.positions, position)
	}
	return b, candidates, rows.Err()
}

// forwardClaimed is a round with plain publishers: the claim commits
// (with the transactional publishers' part), the plain publishers get the
// batch, and the outcome of each event is recorded.
func (f *Forwarder) forwardClaimed(ctx, work context.Context, sc claimScope) (batchResult, error) {
	c, err := f.claim(ctx, sc)
	res := batchResult{selected: c.selected, claimed: len(c.events)}
	res.aggregates, res.bytes = roundShape(c.events)
	if err != nil || len(c.events) == 0 {
		return res, err
	}
	f.batches.Add(1)
	if f.cfg.AfterClaimFunc != nil {
		evs := make([]outbox.Event, len(c.events))
		for i, e := range c.events {
			evs[i] = e.Event
		}
		if err := f.cfg.AfterClaimFunc(ctx, evs); err != nil {
			f.untrack(c)
			return res, err
		}
	}
	outcomes := f.publishPlain(work, c.events)
	sent, err := f.finish(ctx, work, c, outcomes)
	if errors.Is(err, errNotRecorded) {
		// The rows stay claimed by this live forwarder, so nobody publishes
		// them again; the sweep records the outcome once the database
		// answers.
		f.keepUnrecorded(c, outcomes)
		return res, err
	}
	f.untrack(c)
	res.sent = sent
	return res, err
}

func (f *Forwarder) claim(ctx context.Context, sc claimScope) (*claim, error) {
	c := f.newClaim()
	var after afterTx
	err := pgx.BeginTxFunc(ctx, f.pool, claimTxOptions(sc), func(tx pgx.Tx) error {
		b, candidates, err := f.selectClaim(ctx, tx, c.claimedAt, sc)
		if err != nil {
			return fmt.Errorf("error claiming outbox rows: %w", err)
		}
		c.selected = candidates
		if len(b.ids) == 0 {
			return nil
		}
		// A second statement, so a fresh snapshot sees claims that other
		// forwarders committed while this one waited for the locks.
		batch := &pgx.Batch{}
		batch.Queue(f.claimUpdateSQL, b.updateArgs(f.cfg.ID, c.claimedAt)...).Query(func(rows pgx.Rows) error {
			var err error
			c.events, err = pgx.CollectRows(rows, scanEvent)
			return err
		})
		batch.Queue(claimRestSQL)
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("error claiming outbox rows: %w", err)
		}
		sortByPosition(c.events)
		after, err = f.publishTx(ctx, tx, c.events, true, nil)
		return err
	})
	f.countClaim(err == nil, len(c.events))
	if err != nil || len(c.events) == 0 {
		// After an error the commit may still have happened: untracked,
		// such rows are this forwarder's lost claims, which its sweep
		// resets.
		f.untrack(c)
	}
	if err != nil {
		return &claim{selected: c.selected}, err
	}
	f.afterCommit(ctx, after)
	return c, nil
}

func sortByPosition(evs []claimedEvent) {
	sort.Slice(evs, func(i, j int) bool { return evs[i].position < evs[j].position })
}

func scanEvent(row pgx.CollectableRow) (claimedEvent, error) {
	var e claimedEvent
	var metadata []byte
	var payload []byte
	err := row.Scan(&e.ID, &e.position, &e.EventType, &e.EventVersion, &e.EventKind, &e.AggregateID, &payload, &metadata,
		&e.SourceService, &e.CreatedAt, &e.retries, &e.delivered)
	if err != nil {
		return e, err
	}
	e.Payload = payload
	if err := json.Unmarshal(metadata, &e.Metadata); err != nil {
		return e, fmt.Errorf("error decoding metadata of event %s: %w", e.ID, err)
	}
	return e, nil
}

// retryAt is when a row that failed now, after failuresBefore earlier
// failures, is tried again: RetryBackoffMin doubled for each earlier
// failure, at most RetryBackoffMax.
func (f *Forwarder) retryAt(now time.Time, failuresBefore int) time.Time {
	d := f.cfg.RetryBackoffMin
	for range min(failuresBefore, 62) {
		if d >= f.cfg.RetryBackoffMax {
			break
		}
		d *= 2
	}
	return now.Add(min(d, f.cfg.RetryBackoffMax))
}

// Outcomes of an event's attempt, as finishSQL takes them.
const (
	outcomeSent   = "sent"   // every destination has it
	outcomeFailed = "failed" // a destination failed: retry after backoff
	outcomeHeld   = "held"   // not tried (an earlier event of its aggregate failed): back to PENDING as it was
)

// finish records each event's outcome in one statement and returns how many
// rows it marked SENT. The statement is guarded by claimed_by and
// claimed_at: a row whose claim was reset (and maybe re-taken) meanwhile is
// left alone.
// errNotRecorded marks finish's failure to write the outcome (the database
// went away), as opposed to the outcome's own failures, which it records.
var errNotRecorded = errors.New("error recording the forwarding outcome")

func (f *Forwarder) finish(ctx, work context.Context, c *claim, outcomes []eventOutcome) (int, error) {
	stopping := work.Err() != nil
	n := len(c.events)
	ids, kinds, errTexts, delivered := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	retryAt := make([]time.Time, n)
	now := time.Now().UTC()
	var failed []string
	for i, e := range c.events {
		o := outcomes[i]
		ids[i] = e.ID
		all := true
		for _, name := range f.names {
			if !slices.Contains(o.delivered, name) {
				all = false
			}
		}
		switch {
		case all:
			kinds[i] = outcomeSent
		case len(o.errs) > 0 && !stopping:
			kinds[i] = outcomeFailed
			errTexts[i] = joinErrors(o.errs)
			retryAt[i] = f.retryAt(now, e.retries)
			failed = append(failed, fmt.Sprintf("event %s (%s): %s", e.ID, e.EventType, errTexts[i]))
		default:
			// Held back, or abandoned because the forwarder is stopping:
			// not the event's fault, no attempt charged.
			kinds[i] = outcomeHeld
		}
		b, _ := json.Marshal(o.delivered)
		delivered[i] = string(b)
	}
	rows, err := f.pool.Query(context.WithoutCancel(ctx), f.finishSQL, customPlan, ids, kinds, errTexts, delivered,
		f.cfg.ID, c.claimedAt, now, f.cfg.MaxRetries, retryAt)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotRecorded, err)
	}
	var sent, gaveUp, updated int
	var wakeOthers bool
	for rows.Next() {
		var id, status string
		var hasAggregate bool
		if err := rows.Scan(&id, &status, &hasAggregate); err != nil {
			rows.Close()
			return 0, fmt.Errorf("%w: %w", errNotRecorded, err)
		}
		updated++
		wakeOthers = wakeOthers || hasAggregate
		switch status {
		case StatusSent:
			sent++
		case StatusFailed:
			gaveUp++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", errNotRecorded, err)
	}
	if updated != n {
		f.logger.WarnContext(ctx, "outbox claim lost to the stale-claim sweep", "claimed", n, "still_ours", updated)
	}
	f.forwarded.Add(int64(sent))
	f.failures.Add(int64(len(failed)))
	if wakeOthers {
		// Later rows of these aggregates were held back by this batch.
		f.wakeForwarders(ctx)
	}
	f.logger.DebugContext(ctx, "forwarded events", "count", sent, "failed", len(failed))
	if gaveUp > 0 {
		f.logger.ErrorContext(ctx, "outbox events FAILED: retries used up", "count", gaveUp)
	}
	if len(failed) > 0 {
		return sent, fmt.Errorf("%d of %d events not delivered, first: %s", len(failed), n, failed[0])
	}
	return sent, nil
}

// wakeForwarders notifies every forwarder of the schema after a commit that
// finished rows with aggregates: later rows of those aggregates may have
// been held back by them. A statement of its own, after the commit: a
// NOTIFY inside the writing transaction would hold Postgres' global notify
// lock through its WAL flush.
func (f *Forwarder) wakeForwarders(ctx context.Context) {
	if err := sendNotices(context.WithoutCancel(ctx), f.pool, []notice{f.wakeNotice()}); err != nil {
		f.logger.WarnContext(ctx, "error waking the other forwarders", "error", err)
	}
}

// wakeNotice is wakeForwarders' notification.
func (f *Forwarder) wakeNotice() notice { return notice{f.channel, wakeFromPrefix + f.token} }

func eventIDs(events []outbox.Event) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// claimSelectSQL locks the next $1 PENDING rows in emit order that may be
// tried at $3 (skipping rows another forwarder holds, rows waiting for
// their retry, and rows whose aggregate is held by an earlier row that
// cannot move now: CLAIMED, or waiting for its retry), and tells for each
// whether this transaction may claim it: a row with an aggregate only when
// the transaction also gets the aggregate's advisory lock, so two
// forwarders never claim events of one aggregate at the same time (which
// would let them be sent out of order). /*scope*/ is the predicate of the
// claim's scope (claimScopeSQL), with its parameters from $4.
//
// Skipping held aggregates here, rather than leaving them to the claim's
// guard, is what keeps one stuck aggregate from stalling everyone: the
// guard would reject its backlog's rows one batch at a time, and the next
// claim would pick the same rows again. The probe runs per PENDING row it
// passes over, against tributary_outbox_blocking_idx, which holds only the
// held-back heads.
//
// The candidates are picked first, in a CTE the planner cannot merge, and
// only they are tried: with the lock function in the scan's WHERE, a plan
// that sorts after scanning (what Postgres picks while the outbox has no
// statistics yet) called it on every PENDING row, taking an advisory lock
// per aggregate of the whole backlog; enough of them exhaust the shared
// lock table ("out of shared memory").
const claimSelectSQL = `
WITH candidate AS MATERIALIZED (
    SELECT o.id, o.aggregate_id, o.position FROM /*schema*/tributary_outbox o
    WHERE o.status = 'PENDING'
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $3)
      /*scope*/
      AND (o.aggregate_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM /*schema*/tributary_outbox b
            WHERE b.aggregate_id = o.aggregate_id
              AND (b.status = 'CLAIMED' OR (b.status = 'PENDING' AND b.next_attempt_at IS NOT NULL))
              AND b.position < o.position
              AND (b.status = 'CLAIMED' OR b.next_attempt_at > $3)))
    ORDER BY o.position
    LIMIT $1
    FOR UPDATE OF o SKIP LOCKED
)
SELECT id::text, coalesce(aggregate_id, ''), position, aggregate_id IS NULL OR pg_try_advisory_xact_lock(hashtextextended($2 || aggregate_id, 0))
FROM candidate
ORDER BY position`

// claimGapSQL finds, for each aggregate of the batch (the rows $1, their
// aggregates $4, "" for none, and positions $5: claimBatch), its first
// unfinished row (PENDING or CLAIMED) before the batch's last row of it that
// is not in the batch: another forwarder claimed it, or it was skipped
// because it was locked. The claim updates below (claimGuardSQL) leave
// the aggregate's batch rows after that one as they are.
//
// It reads each aggregate once, from its first unfinished row: checked per
// row, the guard read every earlier row of the aggregate for each row it
// marked, the square of a hot lane's share of the batch
// (TestClaimGuardLooksOnceAnAggregate). And it starts at the lowest
// unfinished position of the whole outbox (floor): the unfinished rows'
// index keeps an entry for every row sent since the table's last vacuum,
// and a scan from the aggregate's start stepped over all of them, a batch's
// guard growing with every batch forwarded before it (docs/BENCHMARKS.md,
// "The fifteenth round"). No row below the floor is unfinished in the
// statement's snapshot, and an aggregate's rows commit in position order
// (the emitter holds its advisory lock), so the floor leaves out nothing
// the guard must see. The CLAIMED rows' lowest position is min(position + 0),
// which no index on position matches: as min(position), Postgres could
// plan it as a walk of the position index from its start until the first
// CLAIMED row, over every SENT row (TestClaimGuardFloorGoesByItsIndexes);
// now it reads the few CLAIMED rows through a partial index.
const claimGapSQL = `
WITH batch AS MATERIALIZED (
    SELECT u.aggregate_id, u.position FROM unnest($4::text[], $5::bigint[]) AS u(aggregate_id, position)
    WHERE u.aggregate_id <> ''
),
floor AS MATERIALIZED (
    SELECT least(
        (SELECT p.position FROM /*schema*/tributary_outbox p WHERE p.status = 'PENDING' ORDER BY p.position LIMIT 1),
        (SELECT min(c.position + 0) FROM /*schema*/tributary_outbox c WHERE c.aggregate_id IS NOT NULL AND c.status = 'CLAIMED')) AS position
),
gap AS MATERIALIZED (
    SELECT a.aggregate_id, g.position
    FROM (SELECT aggregate_id, max(position) AS last FROM batch GROUP BY aggregate_id) a
    CROSS JOIN LATERAL (
        SELECT e.position FROM /*schema*/tributary_outbox e
        WHERE e.aggregate_id = a.aggregate_id
          AND e.status IN ('PENDING', 'CLAIMED')
          AND e.position < a.last
          AND e.position >= (SELECT position FROM floor)
          AND e.position NOT IN (SELECT position FROM batch)
        ORDER BY e.position
        LIMIT 1
    ) g
)`

// claimGuardSQL is the WHERE and RETURNING of the two claim updates below:
// a locked row is claimed unless claimGapSQL found a row of its aggregate
// before it that must go first. The ids ($1) go as text and are cast here: sent as
// uuid[], pgx tried the binary format first, failed on the first string,
// and built its error message from the whole list (formatted with %#v)
// before falling back to text, a millisecond for a claim of 1,000
// (docs/BENCHMARKS.md, "The eleventh round"); the emitter's insert does the
// same.
//
// The status condition is written (o.status = 'PENDING') IS TRUE, which no
// index can serve, so the rows are reached through the primary key, as
// internal/riverjob's by-id statements reach River's jobs (byIDs there).
// Written plainly it matched tributary_outbox_pending_idx's predicate, and
// on an outbox without statistics Postgres chose to walk that index whole,
// fetching every PENDING row to compare its id with the batch's: with the
// backlog of bench events it passed over 20 rows for every row it marked,
// 3.2 s of the statement's 7.0 s in a run (TestClaimUpdateGoesByPrimaryKey; docs/BENCHMARKS.md, "The twelfth
// round").
const claimGuardSQL = `
WHERE o.id = ANY($1::text[]::uuid[]) AND (o.status = 'PENDING') IS TRUE
  AND (o.aggregate_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM gap WHERE gap.aggregate_id = o.aggregate_id AND gap.position < o.position))
RETURNING o.id::text, o.position, o.event_type, o.event_version, o.event_kind, coalesce(o.aggregate_id, ''),
          o.payload, o.metadata, o.source_service, o.created_at, o.retry_count, coalesce(o.delivered_to, '{}')`

// claimUpdateSQL claims the locked rows (PENDING -> CLAIMED).
const claimUpdateSQL = claimGapSQL + `
UPDATE /*schema*/tributary_outbox o
SET status = 'CLAIMED', claimed_by = $2, claimed_at = $3, next_attempt_at = NULL` + claimGuardSQL

// claimSentSQL is claimUpdateSQL for the one-transaction path: the rows go
// straight to SENT.
const claimSentSQL = claimGapSQL + `
UPDATE /*schema*/tributary_outbox o
SET status = 'SENT', claimed_by = $2, claimed_at = $3, sent_at = $3, next_attempt_at = NULL, last_error = NULL` + claimGuardSQL

// deliveredSQL notes, in the claim's transaction, that destination $2 has
// the rows $1.
const deliveredSQL = `
UPDATE /*schema*/tributary_outbox
SET delivered_to = array_append(coalesce(delivered_to, '{}'), $2)
WHERE id = ANY($1::uuid[]) AND NOT ($2 = ANY(coalesce(delivered_to, '{}')))`

// finishSQL records the outcome of each claimed row: u.kind is sent,
// failed or held (see the outcome constants), u.error the failure,
// u.delivered the JSON list of destinations that have the row now, u.retry_at
// when a failed row is tried again (unless it is FAILED now).
const finishSQL = `
UPDATE /*schema*/tributary_outbox o
SET delivered_to = ARRAY(SELECT jsonb_array_elements_text(u.delivered::jsonb)),
    status = CASE WHEN u.kind = 'sent' THEN 'SENT'
                  WHEN u.kind = 'failed' AND o.retry_count + 1 >= $8 THEN 'FAILED'
                  ELSE 'PENDING' END,
    retry_count = o.retry_count + CASE WHEN u.kind = 'failed' THEN 1 ELSE 0 END,
    last_error = CASE WHEN u.kind = 'sent' THEN NULL WHEN u.kind = 'failed' THEN u.error ELSE o.last_error END,
    sent_at = CASE WHEN u.kind = 'sent' THEN $7::timestamptz END,
    failed_at = CASE WHEN u.kind = 'failed' AND o.retry_count + 1 >= $8 THEN $7::timestamptz END,
    next_attempt_at = CASE WHEN u.kind = 'failed' AND o.retry_count + 1 < $8 THEN u.retry_at END,
    claimed_by = CASE WHEN u.kind = 'sent' THEN o.claimed_by END,
    claimed_at = CASE WHEN u.kind = 'sent' THEN o.claimed_at END
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $9::timestamptz[]) AS u(id, kind, error, delivered, retry_at)
WHERE o.id = u.id AND o.status = 'CLAIMED' AND o.claimed_by = $5 AND o.claimed_at = $6
RETURNING o.id::text, o.status, o.aggregate_id IS NOT NULL`

// failPendingSQL records a failed attempt on a PENDING row (a
// transactional publisher refused it; its claim rolled back), unless the
// row changed since (another forwarder sent it, or failed it first).
const failPendingSQL = `
UPDATE /*schema*/tributary_outbox o
SET retry_count = o.retry_count + 1,
    last_error = $2,
    status = CASE WHEN o.retry_count + 1 >= $3 THEN 'FAILED' ELSE 'PENDING' END,
    failed_at = CASE WHEN o.retry_count + 1 >= $3 THEN $4::timestamptz END,
    next_attempt_at = CASE WHEN o.retry_count + 1 < $3 THEN $5::timestamptz END
WHERE o.id = $1 AND o.status = 'PENDING' AND o.retry_count = $6
RETURNING o.status`

// staleSQL returns to PENDING the claims older than $1, those of the dead
// processes $2 (queue.StaleProcesses), and this forwarder's ($3) lost
// claims: made before $4 and none of its claims $5.
const staleSQL = `
UPDATE /*schema*/tributary_outbox o
SET status = 'PENDING', claimed_by = NULL, claimed_at = NULL
WHERE o.status = 'CLAIMED'
  AND (o.claimed_at < $1 OR o.claimed_by = ANY($2::text[])
       OR (o.claimed_by = $3 AND o.claimed_at < $4 AND o.claimed_at <> ALL($5::timestamptz[])))`

// releaseSQL returns one claim's rows to PENDING (Stop past its deadline).
const releaseSQL = `
UPDATE /*schema*/tributary_outbox
SET status = 'PENDING', claimed_by = NULL, claimed_at = NULL
WHERE id = ANY($1::uuid[]) AND status = 'CLAIMED' AND claimed_by = $2 AND claimed_at = $3`
