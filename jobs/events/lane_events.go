package events

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Lane events (tributary_event_lane_event, migration 0016): for a consumer
// whose lanes chain (Consumer.chains), the bus writes a lane's events as
// rows of this light table rather than as pending dispatch jobs. A River
// job row is written three times (inserted pending, made running,
// completed), each time into river_job's seven indexes, GIN on args among
// them; a lane event is one row with one index. Its dispatch job is
// inserted only when its turn comes, by the statement that would have
// updated the pending job: a promotion inserts it available (marked as its
// lane's turn), a chain's claim running for the chain's process, and the
// lane event is deleted in the same statement (riverjob.PromoteNext,
// QueuePromoteAtHead, QueueClaimAtHead). So every event still runs as a
// dispatch job of its own, which every later rule (retries, the ordering
// policy, blocked lanes, the repair sweep, the operator's actions) sees as
// before; only the waiting is cheaper. The repair sweep promotes a lane
// event left at a quiet lane's head (planRepair), as it promotes a pending
// head.

// laneEvent is one lane event as the bus writes it: the place, and the
// dispatch job's queue, max attempts and args.
type laneEvent struct {
	riverjob.LaneSeq
	queue       string
	maxAttempts int
	args        []byte
}

// newLaneEvent is the lane event of a dispatch job with args.
func newLaneEvent(args dispatchArgs, queueName string, maxAttempts int) (laneEvent, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return laneEvent{}, fmt.Errorf("error encoding the dispatch of event %s: %w", args.Event.ID, err)
	}
	return laneEvent{LaneSeq: riverjob.LaneSeq{Consumer: args.Consumer, AggregateID: args.AggregateID, Seq: args.Seq},
		queue: queueName, maxAttempts: maxAttempts, args: b}, nil
}

// insertEvents writes evs in tx, in one statement.
func (l *lanes) insertEvents(ctx context.Context, tx pgx.Tx, evs []laneEvent) error {
	n := len(evs)
	if n == 0 {
		return nil
	}
	cs, as, ss, qs := make([]string, n), make([]string, n), make([]int64, n), make([]string, n)
	ms, args := make([]int32, n), make([]string, n)
	for i, ev := range evs {
		cs[i], as[i], ss[i], qs[i] = ev.Consumer, ev.AggregateID, ev.Seq, ev.queue
		ms[i], args[i] = int32(ev.maxAttempts), string(ev.args)
	}
	if _, err := tx.Exec(ctx, l.insertEventsSQL, customPlan, cs, as, ss, qs, ms, args); err != nil {
		return fmt.Errorf("error inserting %d lane events: %w", n, err)
	}
	return nil
}

// eventsAt reports, for each place, whether a lane event waits there (for
// the repair sweep).
func (l *lanes) eventsAt(ctx context.Context, db queue.DBTX, places []riverjob.LaneSeq) ([]bool, error) {
	out := make([]bool, len(places))
	if len(places) == 0 {
		return out, nil
	}
	cs, as, ss := make([]string, len(places)), make([]string, len(places)), make([]int64, len(places))
	for i, p := range places {
		cs[i], as[i], ss[i] = p.Consumer, p.AggregateID, p.Seq
	}
	rows, err := db.Query(ctx, l.eventsAtSQL, customPlan, cs, as, ss)
	if err != nil {
		return nil, fmt.Errorf("error reading the lane events of %d lanes: %w", len(places), err)
	}
	ords, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("error reading the lane events of %d lanes: %w", len(places), err)
	}
	for _, o := range ords {
		out[o-1] = true
	}
	return out, nil
}

// deleteConsumerEvents deletes up to limit of consumer's lane events and
// returns how many.
func (l *lanes) deleteConsumerEvents(ctx context.Context, db queue.DBTX, consumer string, limit int) (int64, error) {
	tag, err := db.Exec(ctx, l.deleteConsumerEventsSQL, consumer, limit)
	if err != nil {
		return 0, fmt.Errorf("error deleting the lane events of consumer %q: %w", consumer, err)
	}
	return tag.RowsAffected(), nil
}

// countEvents counts each consumer's lane events (waiting dispatches
// without a job yet).
func (l *lanes) countEvents(ctx context.Context, db queue.DBTX) (map[string]int64, error) {
	rows, err := db.Query(ctx, l.countEventsSQL)
	if err != nil {
		return nil, fmt.Errorf("error counting lane events: %w", err)
	}
	out := map[string]int64{}
	var consumer string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&consumer, &n}, func() error {
		out[consumer] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error counting lane events: %w", err)
	}
	return out, nil
}

const laneEventInsertSQL = `
INSERT INTO /*schema*/` + riverjob.LaneEventTable + ` (consumer, aggregate_id, seq, queue, max_attempts, args)
SELECT c, a, s, q, m, g::jsonb FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::text[]) AS u(c, a, s, q, m, g)`

const laneEventsAtSQL = `
SELECT u.ord FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, s, ord)
WHERE EXISTS (SELECT 1 FROM /*schema*/` + riverjob.LaneEventTable + ` e WHERE e.consumer = u.c AND e.aggregate_id = u.a AND e.seq = u.s)`

const laneEventDeleteConsumerSQL = `
DELETE FROM /*schema*/` + riverjob.LaneEventTable + ` WHERE (consumer, aggregate_id, seq) IN (
    SELECT consumer, aggregate_id, seq FROM /*schema*/` + riverjob.LaneEventTable + ` WHERE consumer = $1
    LIMIT $2 FOR UPDATE)`

const laneEventCountSQL = `
SELECT consumer, count(*) FROM /*schema*/` + riverjob.LaneEventTable + ` GROUP BY consumer`
