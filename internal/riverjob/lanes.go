package riverjob

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// The River job kinds of the events package's dispatch jobs
// (events.DispatchKind, events.DispatchBatchKind), and the metadata key of a
// lane's turn. They are named here because the statements below select on
// them as literals: migration 0008's index tributary_dispatch_lane_idx is
// partial on the kind, and Postgres uses a partial index only for a query
// whose condition names the same literal.
const (
	DispatchKind      = "tributary.event.dispatch"
	DispatchBatchKind = "tributary.event.dispatch_batch"

	// LaneTurnKey marks, in a dispatch job's metadata, that the job has been
	// its lane's head: set on a job inserted as the head and by every
	// promotion. A lane's head only moves forward, so a marked job is the
	// head or behind it and may run.
	LaneTurnKey = "tributary_lane_turn"
)

// LaneSeq is a place in an ordering lane: the dispatch of the consumer's
// event number Seq of the aggregate.
type LaneSeq struct {
	Consumer    string
	AggregateID string
	Seq         int64
}

// LaneArrays is places as the three parallel arrays the lane statements
// take (unnest($1::text[], $2::text[], $3::bigint[])).
func LaneArrays(places []LaneSeq) (consumers, aggs []string, seqs []int64) {
	consumers, aggs, seqs = make([]string, len(places)), make([]string, len(places)), make([]int64, len(places))
	for i, p := range places {
		consumers[i], aggs[i], seqs[i] = p.Consumer, p.AggregateID, p.Seq
	}
	return consumers, aggs, seqs
}

// PromoteNext makes the pending dispatch at each place available, marked
// with LaneTurnKey, in tx, and returns the queues of the jobs it promoted
// (with repeats). A place that holds a lane event instead (the events
// package's tributary_event_lane_event, LaneEventTable) that no chain
// claimed gets its dispatch job inserted as available, marked, and the lane
// event deleted, in one statement. A place with neither is left alone: the lane is idle, or its
// job is not pending any more. The caller has just moved
// each place's lane to it, in a statement of its own: this one needs a
// snapshot taken after the lane's row lock was granted, so that it sees a
// dispatch a forwarder inserted while the caller waited for the lock.
func PromoteNext(ctx context.Context, tx pgx.Tx, schema string, places []LaneSeq, now time.Time) ([]string, error) {
	if len(places) == 0 {
		return nil, nil
	}
	consumers, aggs, seqs := LaneArrays(places)
	rows, err := tx.Query(ctx, q(schema, promoteNextSQL), customPlan, consumers, aggs, seqs, now)
	var queues []string
	if err == nil {
		queues, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("error promoting the next dispatches: %w", err)
	}
	return queues, nil
}

// QueuePromoteAtHead queues on b the promotion of PromoteNext at each place
// whose lane's head is at it, and appends the queues of the jobs it promoted
// to *queues when b's results are read. b runs in a transaction that has
// locked the places' lanes and moved their heads in statements queued
// before, so this one's snapshot sees what PromoteNext's would. A lane whose
// head is elsewhere (this transaction did not move it there) is left alone;
// one already at the place by another move has its head job promoted
// already, or promotes a pending one that should have been.
func QueuePromoteAtHead(b *pgx.Batch, schema string, places []LaneSeq, now time.Time, queues *[]string) {
	if len(places) == 0 {
		return
	}
	consumers, aggs, seqs := LaneArrays(places)
	b.Queue(q(schema, promoteAtHeadSQL), consumers, aggs, seqs, now).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error promoting the next dispatches: %w", err)
		}
		*queues = append(*queues, got...)
		return nil
	})
}

// PromoteHead makes dispatch id, its lane's head, available if it is still
// pending, marked with LaneTurnKey, and returns its queue; "" when it was not
// pending.
func PromoteHead(ctx context.Context, tx pgx.Tx, schema string, id int64, now time.Time) (string, error) {
	var queue string
	err := tx.QueryRow(ctx, q(schema, promoteHeadSQL), id, now).Scan(&queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error promoting dispatch %d: %w", id, err)
	}
	return queue, nil
}

// ReturnToPending puts running dispatch id back to pending, giving back the
// attempt its start counted, as River's snooze does: a lane job that started
// ahead of its lane's head waits for its turn. River's own update of the
// attempt then finds the job no longer running and leaves it. A limited
// job's limit becomes the mark for its release (limitOnRelease), as in
// GiveBack and RequeueGivenUp.
func ReturnToPending(ctx context.Context, tx pgx.Tx, schema string, id int64, now time.Time) error {
	if _, err := tx.Exec(ctx, q(schema, returnToPendingSQL), id, now); err != nil {
		return fmt.Errorf("error putting dispatch %d back to pending: %w", id, err)
	}
	return nil
}

// RequeueGivenUp puts dispatch id, cancelled or discarded before its turn,
// back to pending with an attempt left (as River's retry gives one to a job
// that used them all); ok is false when the job is in another state.
func RequeueGivenUp(ctx context.Context, tx pgx.Tx, schema string, id int64, now time.Time) (ok bool, err error) {
	err = tx.QueryRow(ctx, q(schema, requeueGivenUpSQL), id, now).Scan(new(int64))
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("error putting dispatch %d back in its lane: %w", id, err)
	}
	return true, nil
}

// LaneJob is the dispatch job at a place of a lane, as the lane's repair and
// the operator's actions look at it. ID is 0 when there is none (deleted by
// hand or by River's retention).
type LaneJob struct {
	ID    int64
	State rivertype.JobState
	// CancelRequested: River's JobCancel asked for its cancellation.
	CancelRequested bool
	// Limited: it carries a limit (LimitMetaName): pending, it waits for
	// admission, not for a promotion.
	Limited bool
	// Args are its encoded args; LastError its latest attempt's error.
	Args      []byte
	LastError string
	// Attempt, AttemptedBy (the latest process) and AttemptedAt describe
	// its latest attempt.
	Attempt     int
	AttemptedBy string
	AttemptedAt *time.Time
}

// LaneJobsAt returns the dispatch at each place, in any state, in the
// places' order: the newest one when there are several (a retry that put
// back a blocked job River had deleted is the same event again). Each is
// one probe of tributary_dispatch_lane_idx.
func LaneJobsAt(ctx context.Context, db DBTX, schema string, places []LaneSeq) ([]LaneJob, error) {
	out := make([]LaneJob, len(places))
	if len(places) == 0 {
		return out, nil
	}
	consumers, aggs, seqs := LaneArrays(places)
	rows, err := db.Query(ctx, q(schema, laneJobsAtSQL), customPlan, consumers, aggs, seqs)
	if err != nil {
		return nil, fmt.Errorf("error reading the dispatches of %d lanes: %w", len(places), err)
	}
	defer rows.Close()
	for rows.Next() {
		var ord int
		var j LaneJob
		var state string
		var lastError, attemptedBy *string
		var attempt int32
		if err := rows.Scan(&ord, &j.ID, &state, &j.CancelRequested, &j.Limited, &j.Args, &lastError, &attempt, &attemptedBy, &j.AttemptedAt); err != nil {
			return nil, fmt.Errorf("error reading the dispatches of %d lanes: %w", len(places), err)
		}
		j.State = rivertype.JobState(state)
		if lastError != nil {
			j.LastError = *lastError
		}
		if attemptedBy != nil {
			j.AttemptedBy = *attemptedBy
		}
		j.Attempt = int(attempt)
		out[ord-1] = j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the dispatches of %d lanes: %w", len(places), err)
	}
	return out, nil
}

// LaneJobAt is LaneJobsAt for one place.
func LaneJobAt(ctx context.Context, db DBTX, schema string, place LaneSeq) (LaneJob, error) {
	jobs, err := LaneJobsAt(ctx, db, schema, []LaneSeq{place})
	if err != nil {
		return LaneJob{}, err
	}
	return jobs[0], nil
}

// JobPlace is a job as an operator's action on it first reads it: its kind,
// its state and, for a dispatch in a lane, its place (InLane).
type JobPlace struct {
	Kind   string
	State  rivertype.JobState
	InLane bool
	Place  LaneSeq
}

// JobPlaceOf reads job id's kind, state and lane place; found is false when
// there is no such job.
func JobPlaceOf(ctx context.Context, db DBTX, schema string, id int64) (p JobPlace, found bool, err error) {
	var state string
	var consumer, agg *string
	var seq *int64
	err = db.QueryRow(ctx, q(schema, jobPlaceSQL), id).Scan(&p.Kind, &state, &consumer, &agg, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("error reading job %d: %w", id, err)
	}
	p.State = rivertype.JobState(state)
	if p.Kind == DispatchKind && agg != nil && *agg != "" && seq != nil {
		p.InLane = true
		p.Place = LaneSeq{Consumer: *consumer, AggregateID: *agg, Seq: *seq}
	}
	return p, true, nil
}

// CancelRequested reports whether River's JobCancel asked for the
// cancellation of job id (CancelAttemptedKey in its metadata), which it
// records on a running job before the job's process hears of it.
func CancelRequested(ctx context.Context, db DBTX, schema string, id int64) (bool, error) {
	var requested bool
	if err := db.QueryRow(ctx, q(schema, cancelRequestedSQL), id).Scan(&requested); err != nil {
		return false, fmt.Errorf("error reading job %d: %w", id, err)
	}
	return requested, nil
}

// laneTurnJSON is the metadata a promotion merges into a job.
const laneTurnJSON = `'{"` + LaneTurnKey + `": true}'`

// dispatchAt is the condition on a dispatch job p at lane place (c, a, s),
// in the words of tributary_dispatch_lane_idx's expressions.
const dispatchAt = `p.kind = '` + DispatchKind + `'
      AND (p.args ->> 'consumer') = u.c AND (p.args ->> 'aggregate_id') = u.a AND ((p.args ->> 'seq')::bigint) = u.s`

// promoteNextSQL is one statement of two parts, which touch different
// rows: the "promoted" part makes each place's pending dispatch available
// (promoteSet, promoteLookup), the "materialized" part moves each place's
// unclaimed lane event into river_job (materializeSet ... materializeAvailable).
// A place holds one or the other. One statement, not two, saves a round trip
// (a pipelined batch, a parse and plan) per promotion; its one snapshot,
// taken after the caller's lane lock, is what each of the two had.
//
// The promotion looks up each place's pending dispatch in a LATERAL
// subquery (LIMIT 1 keeps the planner from flattening it), which always
// probes tributary_dispatch_lane_idx with the place's key. As a plain join,
// the plan Postgres picked while river_job had no statistics yet walked the
// whole partial index for each batch (docs/ARCHITECTURE.md, "Plans").
var promoteNextSQL = promoteNextAt("")

// promoteAtHeadSQL is promoteNextSQL for the places whose lane's head is at
// them (QueuePromoteAtHead).
var promoteAtHeadSQL = promoteNextAt(atLaneHead)

// promoteNextAt is promoteNextSQL with filter (empty, or atLaneHead) added
// to both parts' conditions on the places.
func promoteNextAt(filter string) string {
	return `
WITH promoted AS (` + promoteSet + promotePlaces + filter + promoteLookup + `
),` + materializeSet + filter + materializeAt + `,
materialized AS (` + materializeAvailable + `
)
SELECT queue FROM promoted UNION ALL SELECT queue FROM materialized`
}

const (
	promoteSet = `
UPDATE /*schema*/river_job j
SET state = 'available', scheduled_at = $4, metadata = j.metadata || ` + laneTurnJSON
	promotePlaces = `
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(c, a, s)`
	promoteLookup = `
CROSS JOIN LATERAL (
    SELECT p.id FROM /*schema*/river_job p
    WHERE p.state = 'pending' AND ` + dispatchAt + `
    LIMIT 1
) next
WHERE j.id = next.id AND j.state = 'pending'
RETURNING j.queue`
)

// atLaneHead keeps the places u(c, a, s) whose lane (the events package's
// tributary_event_lane) has its head at s.
const atLaneHead = `
JOIN /*schema*/tributary_event_lane ln ON ln.consumer = u.c AND ln.aggregate_id = u.a AND ln.head_seq = u.s`

const promoteHeadSQL = `
UPDATE /*schema*/river_job SET state = 'available', scheduled_at = $2, metadata = metadata || ` + laneTurnJSON + `
WHERE id = $1 AND state = 'pending'
RETURNING queue`

const returnToPendingSQL = `
UPDATE /*schema*/river_job
SET state = 'pending', attempt = greatest(attempt - 1, 0), scheduled_at = $2, metadata = ` + limitOnRelease + `
WHERE id = $1 AND state = 'running'`

const requeueGivenUpSQL = `
UPDATE /*schema*/river_job
SET state = 'pending', finalized_at = NULL, scheduled_at = $2, metadata = ` + limitOnRelease + `,
    max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END
WHERE id = $1 AND state IN ('cancelled', 'discarded')
RETURNING id`

const laneJobsAtSQL = `
SELECT u.ord, h.id, h.state::text, h.metadata ? '` + CancelAttemptedKey + `', h.metadata ? '` + LimitMetaName + `', h.args, h.errors[array_upper(h.errors, 1)] ->> 'error',
       h.attempt, h.attempted_by[cardinality(h.attempted_by)], h.attempted_at
FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, s, ord)
CROSS JOIN LATERAL (
    SELECT p.id, p.state, p.metadata, p.args, p.errors, p.attempt, p.attempted_by, p.attempted_at FROM /*schema*/river_job p
    WHERE ` + dispatchAt + `
    ORDER BY p.id DESC LIMIT 1
) h`

const jobPlaceSQL = `
SELECT kind, state::text, args ->> 'consumer', args ->> 'aggregate_id', (args ->> 'seq')::bigint
FROM /*schema*/river_job WHERE id = $1`

const cancelRequestedSQL = `
SELECT metadata ? '` + CancelAttemptedKey + `' FROM /*schema*/river_job WHERE id = $1`

// limitOnRelease is a job's metadata with a limit (LimitMetaName) turned
// into the mark for the job's release (LimitMetaOnRelease), for an UPDATE
// of river_job: a dispatch job that goes back to pending to wait for its
// lane's turn must not be admitted before the lane promotes it, and
// migration 0028's door turns the mark back when it does.
const limitOnRelease = `CASE WHEN metadata ? '` + LimitMetaName + `' THEN (metadata - '` + LimitMetaName + `') || jsonb_build_object('` +
	LimitMetaOnRelease + `', metadata -> '` + LimitMetaName + `') ELSE metadata END`

// LaneClaim asks for the lane events that wait at a lane's head Seq and
// after it (see QueueClaimAtHead): up to Events of them (at least one).
type LaneClaim struct {
	LaneSeq
	Events int
}

// Claimed is a lane event QueueClaimAtHead took for a chain, which runs it
// in place without a River job (its first attempt).
type Claimed struct {
	Seq         int64
	MaxAttempts int
	Args        []byte
}

// QueueClaimAtHead queues on b, for each claim whose lane's head is at its
// Seq (as QueuePromoteAtHead), the claim of the unclaimed lane events
// (LaneEventTable) at Seq, Seq+1, ... (up to Events, at least one, stopping
// at the first gap: a place with no lane event, or one claimed already) for
// processID (claimed_by, claimed_at). Where the head is no lane event but a
// pending dispatch job (an older version's, or one the dispatcher put back
// because it started early), that job is promoted as QueuePromoteAtHead
// promotes it, and its queue appended to *queues: a chain runs lane events
// only, River runs the job. When b's results are read, out[i] (len(out) ==
// len(claims)) gets claim i's lane events in lane order. A lane idle at its
// head (head past last_seq: nothing reserved there) is not looked up, and
// a lane whose lane event was claimed is not looked up in river_job.
func QueueClaimAtHead(b *pgx.Batch, schema string, claims []LaneClaim, processID string, now time.Time, out [][]Claimed, queues *[]string) {
	n := len(claims)
	if n == 0 {
		return
	}
	consumers, aggs, seqs := make([]string, n), make([]string, n), make([]int64, n)
	evCounts := make([]int32, n)
	for i, c := range claims {
		consumers[i], aggs[i], seqs[i] = c.Consumer, c.AggregateID, c.Seq
		evCounts[i] = int32(max(1, c.Events))
	}
	b.Queue(q(schema, claimAtHeadSQL), consumers, aggs, seqs, evCounts, now, processID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int
			var c Claimed
			var maxAttempts int32
			var queue *string
			if err := rows.Scan(&ord, &c.Seq, &maxAttempts, &c.Args, &queue); err != nil {
				return fmt.Errorf("error claiming the next lane events of %d lanes: %w", n, err)
			}
			if queue != nil {
				*queues = append(*queues, *queue)
				continue
			}
			c.MaxAttempts = int(maxAttempts)
			out[ord-1] = append(out[ord-1], c)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("error claiming the next lane events of %d lanes: %w", n, err)
		}
		for _, cs := range out {
			slices.SortFunc(cs, func(a, b Claimed) int { return cmp.Compare(a.Seq, b.Seq) })
		}
		return nil
	})
}

// GiveBack puts claimed dispatches that did not run back to pending with
// their attempt given back (as ReturnToPending), in tx; a job no longer
// running at that attempt is left alone.
func GiveBack(ctx context.Context, tx pgx.Tx, schema string, attempts []Attempt, now time.Time) error {
	if len(attempts) == 0 {
		return nil
	}
	ids, nums := AttemptArrays(attempts)
	if _, err := tx.Exec(ctx, q(schema, giveBackSQL), customPlan, ids, nums, now); err != nil {
		return fmt.Errorf("error putting %d claimed dispatches back to pending: %w", len(attempts), err)
	}
	return nil
}

// claimAtHeadSQL: for each lane ($1..$3: consumer, aggregate, head; $4 the
// most lane events) whose head is there and that is not idle, the
// unclaimed lane events from the head on without a gap (the k-th in seq
// order is at head + k - 1: one range of the primary key), claimed ($6 the
// process, $5 now); for the others, the pending dispatch job at the head,
// if any (one probe of tributary_dispatch_lane_idx), promoted.
const claimAtHeadSQL = `
WITH u AS MATERIALIZED (
    SELECT u.c, u.a, u.s, u.k, u.ord
    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) WITH ORDINALITY AS u(c, a, s, k, ord)` + atLaneHead + `
    WHERE ln.head_seq <= ln.last_seq
),
run AS MATERIALIZED (
    SELECT u.ord, u.c, u.a, r.seq
    FROM u
    CROSS JOIN LATERAL (
        SELECT e.seq, row_number() OVER (ORDER BY e.seq) AS rn
        FROM /*schema*/` + LaneEventTable + ` e
        WHERE e.consumer = u.c AND e.aggregate_id = u.a AND e.seq >= u.s AND e.seq < u.s + u.k
          AND e.claimed_by IS NULL
    ) r
    WHERE r.seq = u.s + r.rn - 1
),
ev AS (
    UPDATE /*schema*/` + LaneEventTable + ` e SET claimed_by = $6, claimed_at = $5
    FROM run
    WHERE e.consumer = run.c AND e.aggregate_id = run.a AND e.seq = run.seq AND e.claimed_by IS NULL
    RETURNING run.ord, e.seq, e.max_attempts, e.args
),
promoted AS (
    UPDATE /*schema*/river_job j
    SET state = 'available', scheduled_at = $5, metadata = j.metadata || ` + laneTurnJSON + `
    FROM u
    CROSS JOIN LATERAL (
        SELECT p.id FROM /*schema*/river_job p
        WHERE p.state = 'pending' AND ` + dispatchAt + `
        LIMIT 1
    ) next
    WHERE j.id = next.id AND j.state = 'pending' AND u.ord NOT IN (SELECT ord FROM run)
    RETURNING j.queue
)
SELECT ord, seq, max_attempts::int, args, NULL::text FROM ev
UNION ALL
SELECT 0, 0, 0, '', queue FROM promoted`

const giveBackSQL = `
UPDATE /*schema*/river_job j
SET state = 'pending', attempt = greatest(j.attempt - 1, 0), scheduled_at = $3, metadata = ` + limitOnRelease + `
FROM unnest($1::bigint[], $2::int[]) AS u(id, attempt)
WHERE j.id = u.id AND j.state = 'running' AND j.attempt = u.attempt`

// packedEvArgs is the lane event ev's args (text) as a dispatch job's: the
// events package writes a lane event's event as an object, which River's
// GIN index on args would take an entry for every key and value of, so it
// is packed into a string (one entry) for the dispatch job; args written
// packed stay as they are.
const packedEvArgs = `(CASE WHEN jsonb_typeof(ev.args::jsonb -> 'event') = 'object'
        THEN jsonb_set(ev.args::jsonb, '{event}', to_jsonb((ev.args::jsonb -> 'event')::text))
        ELSE ev.args::jsonb END)`

// LaneEventTable is the events package's table of lane events (migration
// 0016): a lane's events behind its head, kept out of river_job until their
// turn. Named here because the
// statements below move a lane event into river_job.
const LaneEventTable = "tributary_event_lane_event"

// materializeSet is the start of the part of promoteNextSQL that moves the
// lane events at the places u(c, a, s) into river_job: the DELETE (CTE ev)
// returns them, the INSERT after it makes each a dispatch job.
const materializeSet = `
ev AS (
    DELETE FROM /*schema*/` + LaneEventTable + ` e
    USING unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, s, ord)`

const materializeAt = `
    WHERE e.consumer = u.c AND e.aggregate_id = u.a AND e.seq = u.s AND e.claimed_by IS NULL
    RETURNING u.ord, e.seq, e.queue, e.max_attempts, e.args
)`

// materializeAvailable inserts the lane events' dispatch jobs as available
// and marked as their lane's turn, as a promotion leaves a pending one.
const materializeAvailable = `
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, created_at, scheduled_at, priority, args, kind, metadata, queue, tags)
SELECT 'available', 0, ev.max_attempts, $4::timestamptz, $4::timestamptz, 1, ` + packedEvArgs + `, '` + DispatchKind + `', ` + laneTurnJSON + `, ev.queue, '{}'::varchar[]
FROM ev
RETURNING queue`
