package events

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/internal/pglisten"
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
		conn, err := pglisten.Open(ctx, f.pool, f.channel, "forwarder")
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
		listen := pglisten.Loop{Pool: f.pool, Channel: f.channel, Who: "forwarder", Fallback: "the sweep",
			Retry: f.cfg.SweepInterval, Logger: f.logger,
			Reconnected: func() { signal(wakes) },
			Notified: func(payload string) {
				switch loop, all, none := wakeLoops(payload, f.token, len(wakes)); {
				case none:
				case all:
					signal(wakes)
				default:
					signal(wakes[loop : loop+1])
				}
			}}
		run.Go(func() { listen.Run(loopCtx, conn) })
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
