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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// Forwarder defaults.
const (
	ForwardBatchSizeDefault     = 500
	ForwardSweepIntervalDefault = time.Second
	ForwardPollIntervalDefault  = 10 * time.Millisecond
	ForwardConcurrencyDefault   = 2
	StaleClaimAfterDefault      = 5 * time.Minute
	ForwardMaxRetriesDefault    = 10
)

// TxPublisher is an OutboxPublisher that accepts events inside the
// transaction that marks them SENT. The forwarder prefers it: what the
// publisher writes commits together with the SENT mark, so forwarding to it
// is exactly-once (the in-database Bus is one).
type TxPublisher interface {
	queue.OutboxPublisher
	PublishOutboxTx(ctx context.Context, tx pgx.Tx, events []queue.OutboxEvent) error
}

// AfterCommitter is implemented by a TxPublisher with work to do once the
// transaction that published committed (the Bus wakes River's producers).
type AfterCommitter interface {
	AfterCommit(ctx context.Context)
}

// afterCommit runs the transactional publishers' after-commit hooks.
func (f *Forwarder) afterCommit(ctx context.Context) {
	for _, p := range f.cfg.Publishers {
		if ac, ok := p.(AfterCommitter); ok {
			if _, tx := p.(TxPublisher); tx {
				ac.AfterCommit(ctx)
			}
		}
	}
}

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	// Schema holds tributary's tables. Defaults to "public".
	Schema string

	// Logger for the forwarder. Defaults to slog.Default().
	Logger *slog.Logger

	// Publishers receive every claimed batch; a row is SENT only when all
	// of them accepted it. Required. Publishers that implement TxPublisher
	// are called inside the transaction that marks the rows SENT, after
	// every other publisher accepted the batch.
	Publishers []queue.OutboxPublisher

	// ID names this forwarder in claimed_by. Defaults to host-pid-random.
	ID string

	// BatchSize is the most rows one claim takes. Defaults to 500.
	BatchSize int

	// SweepInterval is how often the forwarder looks for rows without being
	// notified, and resets stale claims. A lost notification delays events
	// by at most this much; so does a failed batch before its retry.
	//
	// Defaults to 1 second.
	SweepInterval time.Duration

	// PollInterval is how soon the forwarder looks again after a batch that
	// found rows, without a notification; the wait doubles up to
	// SweepInterval while nothing is found. It is what delivers events
	// emitted without NOTIFY (EmitterConfig.NoNotify) quickly under load.
	//
	// Defaults to 10 ms.
	PollInterval time.Duration

	// StaleClaimAfter is how long a row may stay CLAIMED before the sweep
	// assumes its forwarder died and returns it to PENDING. It must be
	// longer than a publish can take.
	//
	// Defaults to 5 minutes.
	StaleClaimAfter time.Duration

	// MaxRetries is how many failed forwarding attempts turn a row FAILED.
	//
	// Defaults to 10.
	MaxRetries int

	// Concurrency is how many batches the forwarder works on at once. They
	// claim disjoint rows (SKIP LOCKED) and keep per-aggregate order the
	// same way separate forwarders do.
	//
	// Defaults to 2.
	Concurrency int

	// AfterClaimFunc, when set, runs after each claim commits and before
	// the batch is published. Tests use it to stop a forwarder between the
	// two, as a crash would.
	AfterClaimFunc func(ctx context.Context, events []queue.OutboxEvent) error
}

// ForwarderStats are a forwarder's counters since it was created.
type ForwarderStats struct {
	Batches     int64 `json:"batches"`
	Forwarded   int64 `json:"forwarded"`
	Failures    int64 `json:"failures"`
	StaleResets int64 `json:"stale_resets"`
}

// Forwarder moves outbox rows to publishers: PENDING -> CLAIMED -> SENT
// (or back to PENDING, and FAILED after MaxRetries). Run one per worker
// process; any number of forwarders share an outbox safely. It is a
// queue.Service.
type Forwarder struct {
	pool   *pgxpool.Pool
	cfg    ForwarderConfig
	logger *slog.Logger
	lockNS string

	oneTx                                                      bool
	claimSelectSQL, claimUpdateSQL, sentSQL, failSQL, staleSQL string
	claimSentSQL                                               string
	channel                                                    string

	batches, forwarded, failures, staleResets atomic.Int64

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
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
	cfg.BatchSize = cmp.Or(cfg.BatchSize, ForwardBatchSizeDefault)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, ForwardSweepIntervalDefault)
	cfg.StaleClaimAfter = cmp.Or(cfg.StaleClaimAfter, StaleClaimAfterDefault)
	cfg.PollInterval = min(cmp.Or(cfg.PollInterval, ForwardPollIntervalDefault), cfg.SweepInterval)
	cfg.MaxRetries = cmp.Or(cfg.MaxRetries, ForwardMaxRetriesDefault)
	cfg.Concurrency = max(cmp.Or(cfg.Concurrency, ForwardConcurrencyDefault), 1)
	q := func(s string) string { return queue.Qualify(cfg.Schema, s) }
	oneTx := cfg.AfterClaimFunc == nil
	for _, p := range cfg.Publishers {
		if _, ok := p.(TxPublisher); !ok {
			oneTx = false
		}
	}
	return &Forwarder{
		oneTx:          oneTx,
		claimSentSQL:   q(claimSentSQL),
		pool:           pool,
		cfg:            cfg,
		logger:         cfg.Logger.With("component", "forwarder", "forwarder_id", cfg.ID),
		lockNS:         "tributary.outbox." + cfg.Schema + ":",
		claimSelectSQL: q(claimSelectSQL),
		claimUpdateSQL: q(claimUpdateSQL),
		sentSQL:        q(sentSQL),
		failSQL:        q(failSQL),
		staleSQL:       q(staleSQL),
		channel:        NotifyChannel(cfg.Schema),
	}, nil
}

func defaultForwarderID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "host"), os.Getpid(), hex.EncodeToString(b))
}

// Name implements queue.Service.
func (f *Forwarder) Name() string { return "outbox forwarder" }

// ID returns the forwarder's claimed_by name.
func (f *Forwarder) ID() string { return f.cfg.ID }

// Stats returns the forwarder's counters.
func (f *Forwarder) Stats() ForwarderStats {
	return ForwarderStats{Batches: f.batches.Load(), Forwarded: f.forwarded.Load(), Failures: f.failures.Load(), StaleResets: f.staleResets.Load()}
}

// Start opens the LISTEN connection and starts forwarding. It returns once
// the forwarder listens, so no notification after Start is missed.
func (f *Forwarder) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		return errors.New("forwarder already started")
	}
	conn, err := f.listen(ctx)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	f.done = make(chan struct{})
	wakes := make([]chan struct{}, f.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
		wg.Add(1)
		go func() { defer wg.Done(); f.forwardLoop(runCtx, wakes[i], i == 0) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); f.listenLoop(runCtx, conn, wakes) }()
	go func() { wg.Wait(); close(f.done) }()
	f.logger.InfoContext(ctx, "forwarder started", "batch_size", f.cfg.BatchSize, "publishers", len(f.cfg.Publishers))
	return nil
}

// Stop stops forwarding and waits for the current batch, or until ctx is
// done: then the batch is abandoned and its rows return to PENDING after
// StaleClaimAfter.
func (f *Forwarder) Stop(ctx context.Context) error {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel = nil
	f.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		f.logger.InfoContext(ctx, "forwarder stopped")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("forwarder did not stop in time: %w", ctx.Err())
	}
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
		_, err := conn.WaitForNotification(ctx)
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
		signal(wakes)
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

func (f *Forwarder) forwardLoop(ctx context.Context, wake <-chan struct{}, sweeper bool) {
	ticker := time.NewTicker(f.cfg.SweepInterval)
	defer ticker.Stop()
	if sweeper {
		f.resetStale(ctx)
	}
	// Between notifications the forwarder polls: every PollInterval while
	// batches keep finding rows, backing off to SweepInterval when idle.
	idle := f.cfg.PollInterval
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		before := f.forwarded.Load()
		more, err := f.ForwardOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.logger.WarnContext(ctx, "forwarding failed, will retry", "error", err)
		}
		if more && err == nil {
			continue
		}
		if f.forwarded.Load() > before && err == nil {
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
		case <-ticker.C:
			if sweeper {
				f.resetStale(ctx)
			}
		}
	}
}

// resetStale returns rows claimed longer than StaleClaimAfter to PENDING.
func (f *Forwarder) resetStale(ctx context.Context) {
	cutoff := time.Now().Add(-f.cfg.StaleClaimAfter)
	tag, err := f.pool.Exec(ctx, f.staleSQL, customPlan, cutoff)
	if err != nil {
		if ctx.Err() == nil {
			f.logger.WarnContext(ctx, "error resetting stale outbox claims", "error", err)
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		f.staleResets.Add(n)
		f.logger.WarnContext(ctx, "reset stale outbox claims", "count", n, "claimed_before", cutoff)
	}
}

// claim is one committed claim: the rows now CLAIMED by this forwarder.
type claim struct {
	events    []queue.OutboxEvent
	claimedAt time.Time
	selected  int
}

// ForwardOnce claims one batch, publishes it and marks it SENT (or failed).
// more reports that a full batch was found, so another may be waiting.
func (f *Forwarder) ForwardOnce(ctx context.Context) (more bool, err error) {
	if f.oneTx {
		return f.forwardInOneTx(ctx)
	}
	c, err := f.claim(ctx)
	if err != nil {
		return false, err
	}
	if len(c.events) == 0 {
		return c.selected >= f.cfg.BatchSize, nil
	}
	f.batches.Add(1)
	if f.cfg.AfterClaimFunc != nil {
		if err := f.cfg.AfterClaimFunc(ctx, c.events); err != nil {
			return false, err
		}
	}
	if err := f.publish(ctx, c); err != nil {
		f.failures.Add(int64(len(c.events)))
		if ferr := f.fail(context.WithoutCancel(ctx), c, err); ferr != nil {
			return false, errors.Join(err, ferr)
		}
		return false, err
	}
	return c.selected >= f.cfg.BatchSize, nil
}

// forwardInOneTx is ForwardOnce when every publisher is transactional:
// claim, publish and SENT in one transaction, one commit. The rows are never
// visibly CLAIMED; a crash rolls everything back and leaves them PENDING.
func (f *Forwarder) forwardInOneTx(ctx context.Context) (more bool, err error) {
	var selected, sent int
	var wakeOthers bool
	now := time.Now().UTC().Truncate(time.Microsecond)
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		ids, candidates, err := f.selectClaim(ctx, tx)
		if err != nil {
			return fmt.Errorf("error claiming outbox rows: %w", err)
		}
		selected = candidates
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, f.claimSentSQL, customPlan, ids, f.cfg.ID, now)
		if err != nil {
			return fmt.Errorf("error marking outbox rows sent: %w", err)
		}
		claimed, err := pgx.CollectRows(rows, scanEvent)
		if err != nil {
			return fmt.Errorf("error marking outbox rows sent: %w", err)
		}
		if len(claimed) == 0 {
			return nil
		}
		sort.Slice(claimed, func(i, j int) bool { return claimed[i].position < claimed[j].position })
		events := make([]queue.OutboxEvent, len(claimed))
		for i, e := range claimed {
			events[i] = e.OutboxEvent
		}
		for _, p := range f.cfg.Publishers {
			if err := p.(TxPublisher).PublishOutboxTx(ctx, tx, events); err != nil {
				return fmt.Errorf("publisher %s: %w", p.Name(), err)
			}
		}
		sent = len(events)
		for _, e := range events {
			if e.AggregateID != "" {
				wakeOthers = true
				break
			}
		}
		return nil
	})
	if sent > 0 && err == nil {
		f.afterCommit(ctx)
	}
	if wakeOthers && err == nil {
		f.wakeForwarders(ctx)
	}
	if err != nil {
		// Nothing was written; the rows are PENDING as before. Retry on the
		// next poll rather than at once.
		f.failures.Add(int64(max(selected, 1)))
		return false, err
	}
	if sent > 0 {
		f.batches.Add(1)
		f.forwarded.Add(int64(sent))
		f.logger.DebugContext(ctx, "forwarded events", "count", sent)
	}
	return selected >= f.cfg.BatchSize, nil
}

// selectClaim locks the next PENDING rows and returns the ids of those
// this transaction may claim (see claimSelectSQL), and how many rows it
// looked at.
func (f *Forwarder) selectClaim(ctx context.Context, tx pgx.Tx) (ids []string, candidates int, err error) {
	rows, err := tx.Query(ctx, f.claimSelectSQL, customPlan, f.cfg.BatchSize, f.lockNS)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var mine bool
		if err := rows.Scan(&id, &mine); err != nil {
			return nil, 0, err
		}
		candidates++
		if mine {
			ids = append(ids, id)
		}
	}
	return ids, candidates, rows.Err()
}

func (f *Forwarder) claim(ctx context.Context) (claim, error) {
	c := claim{claimedAt: time.Now().UTC().Truncate(time.Microsecond)}
	var claimed []positionedEvent
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		ids, candidates, err := f.selectClaim(ctx, tx)
		if err != nil {
			return err
		}
		c.selected = candidates
		if len(ids) == 0 {
			return nil
		}
		// A second statement, so a fresh snapshot sees claims that other
		// forwarders committed while this one waited for the locks.
		rows, err := tx.Query(ctx, f.claimUpdateSQL, customPlan, ids, f.cfg.ID, c.claimedAt)
		if err != nil {
			return err
		}
		claimed, err = pgx.CollectRows(rows, scanEvent)
		return err
	})
	if err != nil {
		return claim{}, fmt.Errorf("error claiming outbox rows: %w", err)
	}
	sort.Slice(claimed, func(i, j int) bool { return claimed[i].position < claimed[j].position })
	c.events = make([]queue.OutboxEvent, len(claimed))
	for i, e := range claimed {
		c.events[i] = e.OutboxEvent
	}
	return c, nil
}

type positionedEvent struct {
	queue.OutboxEvent
	position int64
}

func scanEvent(row pgx.CollectableRow) (positionedEvent, error) {
	var e positionedEvent
	var metadata []byte
	var payload []byte
	err := row.Scan(&e.ID, &e.position, &e.EventType, &e.EventVersion, &e.EventKind, &e.AggregateID, &payload, &metadata, &e.SourceService, &e.CreatedAt)
	if err != nil {
		return e, err
	}
	e.Payload = payload
	if err := json.Unmarshal(metadata, &e.Metadata); err != nil {
		return e, fmt.Errorf("error decoding metadata of event %s: %w", e.ID, err)
	}
	return e, nil
}

// publish hands the batch to every plain publisher, then marks it SENT and
// calls the transactional publishers in one transaction.
func (f *Forwarder) publish(ctx context.Context, c claim) (err error) {
	var txPubs []TxPublisher
	for _, p := range f.cfg.Publishers {
		if tp, ok := p.(TxPublisher); ok {
			txPubs = append(txPubs, tp)
			continue
		}
		if err := p.PublishOutbox(ctx, c.events); err != nil {
			return fmt.Errorf("publisher %s: %w", p.Name(), err)
		}
	}
	ids := eventIDs(c.events)
	var wakeOthers bool
	defer func() {
		if err == nil {
			f.afterCommit(ctx)
		}
		if wakeOthers && err == nil {
			f.wakeForwarders(ctx)
		}
	}()
	return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, f.sentSQL, customPlan, ids, f.cfg.ID, c.claimedAt, time.Now().UTC())
		if err != nil {
			return fmt.Errorf("error marking outbox rows sent: %w", err)
		}
		var sent []string
		for rows.Next() {
			var id string
			var hasAggregate bool
			if err := rows.Scan(&id, &hasAggregate); err != nil {
				rows.Close()
				return fmt.Errorf("error marking outbox rows sent: %w", err)
			}
			sent = append(sent, id)
			wakeOthers = wakeOthers || hasAggregate
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("error marking outbox rows sent: %w", err)
		}
		events := c.events
		if len(sent) != len(c.events) {
			// The sweep gave some rows to another forwarder (this one was
			// too slow); only the rows still ours go to the transactional
			// publishers, so they see each row once.
			f.logger.WarnContext(ctx, "outbox claim lost to the stale-claim sweep", "claimed", len(c.events), "still_ours", len(sent))
			keep := make(map[string]bool, len(sent))
			for _, id := range sent {
				keep[id] = true
			}
			events = events[:0:0]
			for _, e := range c.events {
				if keep[e.ID] {
					events = append(events, e)
				}
			}
		}
		if len(events) > 0 {
			for _, p := range txPubs {
				if err := p.PublishOutboxTx(ctx, tx, events); err != nil {
					return fmt.Errorf("publisher %s: %w", p.Name(), err)
				}
			}
		}
		f.forwarded.Add(int64(len(events)))
		f.logger.DebugContext(ctx, "forwarded events", "count", len(events))
		return nil
	})
}

// wakeForwarders notifies every forwarder of the schema after a commit that
// sent rows with aggregates: later rows of those aggregates may have been
// held back by this batch. A statement of its own, after the commit: a
// NOTIFY inside the writing transaction would hold Postgres' global notify
// lock through its WAL flush.
func (f *Forwarder) wakeForwarders(ctx context.Context) {
	if _, err := f.pool.Exec(context.WithoutCancel(ctx), "SELECT pg_notify($1, '')", f.channel); err != nil {
		f.logger.WarnContext(ctx, "error waking the other forwarders", "error", err)
	}
}

func (f *Forwarder) fail(ctx context.Context, c claim, cause error) error {
	tag, err := f.pool.Exec(ctx, f.failSQL, customPlan, eventIDs(c.events), f.cfg.ID, c.claimedAt, cause.Error(), f.cfg.MaxRetries, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("error recording the forwarding failure: %w", err)
	}
	f.logger.WarnContext(ctx, "forwarding batch failed", "count", tag.RowsAffected(), "error", cause)
	return nil
}

func eventIDs(events []queue.OutboxEvent) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// claimSelectSQL locks the next $1 PENDING rows in emit order (skipping
// rows another forwarder holds) and tells for each whether this
// transaction may claim it: a row with an aggregate only when the
// transaction also gets the aggregate's advisory lock, so two forwarders
// never claim events of one aggregate at the same time (which would let
// them be sent out of order). The candidates are picked first, in a CTE the
// planner cannot merge, and only they are tried: with the lock function in
// the scan's WHERE, a plan that sorts after scanning (what Postgres picks
// while the outbox has no statistics yet) called it on every PENDING row,
// taking an advisory lock per aggregate of the whole backlog; enough of
// them exhaust the shared lock table ("out of shared memory").
const claimSelectSQL = `
WITH candidate AS MATERIALIZED (
    SELECT id, aggregate_id, position FROM /*schema*/tributary_outbox
    WHERE status = 'PENDING'
    ORDER BY position
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
SELECT id::text, aggregate_id IS NULL OR pg_try_advisory_xact_lock(hashtextextended($2 || aggregate_id, 0))
FROM candidate
ORDER BY position`

// claimGuardSQL and claimReturningSQL are the WHERE and RETURNING of the
// two claim updates below: a locked row is claimed unless an earlier
// unfinished row of its aggregate lies outside this batch (claimed by
// another forwarder, or skipped because it was locked).
const claimGuardSQL = `
WHERE o.id = ANY($1::uuid[]) AND o.status = 'PENDING'
  AND (o.aggregate_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM /*schema*/tributary_outbox e
        WHERE e.aggregate_id = o.aggregate_id
          AND e.status IN ('PENDING', 'CLAIMED')
          AND e.position < o.position
          AND e.id <> ALL($1::uuid[])))
RETURNING o.id::text, o.position, o.event_type, o.event_version, o.event_kind, coalesce(o.aggregate_id, ''),
          o.payload, o.metadata, o.source_service, o.created_at`

// claimUpdateSQL claims the locked rows (PENDING -> CLAIMED).
const claimUpdateSQL = `
UPDATE /*schema*/tributary_outbox o
SET status = 'CLAIMED', claimed_by = $2, claimed_at = $3` + claimGuardSQL

// claimSentSQL is claimUpdateSQL for the one-transaction path: the rows go
// straight to SENT.
const claimSentSQL = `
UPDATE /*schema*/tributary_outbox o
SET status = 'SENT', claimed_by = $2, claimed_at = $3, sent_at = $3` + claimGuardSQL

// sentSQL marks the rows still claimed by this claim SENT.
const sentSQL = `
UPDATE /*schema*/tributary_outbox
SET status = 'SENT', sent_at = $4, last_error = NULL
WHERE id = ANY($1::uuid[]) AND status = 'CLAIMED' AND claimed_by = $2 AND claimed_at = $3
RETURNING id::text, aggregate_id IS NOT NULL`

const failSQL = `
UPDATE /*schema*/tributary_outbox
SET retry_count = retry_count + 1,
    last_error = $4,
    status = CASE WHEN retry_count + 1 >= $5 THEN 'FAILED' ELSE 'PENDING' END,
    failed_at = CASE WHEN retry_count + 1 >= $5 THEN $6::timestamptz ELSE NULL END,
    claimed_by = NULL, claimed_at = NULL
WHERE id = ANY($1::uuid[]) AND status = 'CLAIMED' AND claimed_by = $2 AND claimed_at = $3`

const staleSQL = `
UPDATE /*schema*/tributary_outbox
SET status = 'PENDING', claimed_by = NULL, claimed_at = NULL
WHERE status = 'CLAIMED' AND claimed_at < $1`
