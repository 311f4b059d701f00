package events

import (
	"github.com/jackc/pgx/v5"
)

// The forwarder's statements and the planner settings its claims run
// under.

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
// against 0.04 ms of execution at a few events a round
// (docs/decisions/0001-generic-plans.md). The claim of the rows of only (claimOnly) is planned for them:
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
// 500 events/s, the largest statement cost of the latency path.
const claimRestSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_seqscan', 'on', true)`

// publishersPlanSQL is claimRestSQL for the transactional publishers that
// run after a started one (the Bus, whose start sets generic plans without
// sequential scans, hash joins or merge joins: genericPlanSQL): custom
// plans, and the scans and joins as the session has them, not the Bus's
// settings (TestTxPublishersBesideTheBusKeepThePlanSettings). A round trip, only
// where such a publisher runs after a started one.
const publishersPlanSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config(s.name, s.reset_val, true)
FROM pg_settings s WHERE s.name IN ('enable_seqscan', 'enable_hashjoin', 'enable_mergejoin')`

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
// guard growing with every batch forwarded before it. No row below the floor is unfinished in the
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
// before falling back to text, a millisecond for a claim of 1,000; the
// emitter's insert does the same.
//
// The status condition is written (o.status = 'PENDING') IS TRUE, which no
// index can serve, so the rows are reached through the primary key, as
// internal/riverjob's by-id statements reach River's jobs (byIDs there).
// Written plainly it matched tributary_outbox_pending_idx's predicate, and
// on an outbox without statistics Postgres chose to walk that index whole,
// fetching every PENDING row to compare its id with the batch's: with the
// backlog of bench events it passed over 20 rows for every row it marked,
// 3.2 s of the statement's 7.0 s in a run (TestClaimUpdateGoesByPrimaryKey).
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
