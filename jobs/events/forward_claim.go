package events

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/outbox"
)

// Claiming: a forward round's claim of outbox rows (what it may take, how
// big it grows), and the claims this forwarder tracks until their outcome
// is recorded.

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
// events a second in bench events; over 10 or 100 aggregates, whose claims already hold dozens of
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
// (docs/decisions/0001-generic-plans.md).
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
