package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/outbox"
)

// Delivery: one forward round, in one transaction with the transactional
// publishers (the bus) when every publisher is one, else a committed claim
// published to the plain ones and recorded after.

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
// ordered event's latency.
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
