package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/outbox"
)

// Outcomes: recording what a round did with each claimed row (sent,
// retried later, failed), and recording again an outcome whose commit was
// lost.

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
