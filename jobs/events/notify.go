package events

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tributary-run/tributary/queue"
)

// notifyChannel is the LISTEN/NOTIFY channel that wakes the forwarders of a
// schema. Channel names are global to a database, so the schema is part of
// it (hashed to stay within Postgres' 63-byte identifier limit).
func notifyChannel(schema string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	return fmt.Sprintf("tributary_outbox_%016x", h.Sum64())
}

// shareKeySQL is the SQL of the non-negative key that splits the
// aggregates among a forwarder's loops (claimScope): the loop of share s
// of n claims the aggregates whose key modulo n is s. The emitter's
// notification carries the key (wakeAggregatePrefix), so a listener wakes
// only that loop.
func shareKeySQL(aggregate string) string {
	return "(hashtext(" + aggregate + ") & 2147483647)"
}

// Payloads of the forwarders' notifications. Any other payload (the
// empty one of the outbox replays, one from an older version) wakes every
// loop.
const (
	// wakeAggregatePrefix and a share key (shareKeySQL): an emit of rows
	// of one aggregate. It wakes only the loop whose share holds the
	// aggregate. Before, every emit woke every loop, and all but one
	// claimed nothing: at 500 events/s over 1,000 aggregates, a third of
	// the forward rounds were empty ones.
	wakeAggregatePrefix = "a"
	// wakeFromPrefix and a forwarder's token: that forwarder's wake of
	// the others after it forwarded rows of aggregates (they may have
	// stepped over rows of those aggregates meanwhile). The forwarder
	// itself ignores it: its loops claim disjoint aggregates, so none of
	// them held back another's.
	wakeFromPrefix = "f"
)

// emitWakeSQL is the payload of an emit's notification, from the rows'
// aggregates $5: the share key of their aggregate when they all have the
// same one, else empty (a row without an aggregate is in every share).
var emitWakeSQL = `(SELECT CASE WHEN count(*) = count(a) AND min(a) = max(a)
    THEN '` + wakeAggregatePrefix + `' || ` + shareKeySQL("min(a)") + `::text ELSE '' END
  FROM unnest($5::text[]) AS a)`

// wakeLoops returns which of n loops the notification payload wakes
// (all: every one), for the forwarder whose token is self.
func wakeLoops(payload, self string, n int) (loop int, all, none bool) {
	switch {
	case strings.HasPrefix(payload, wakeFromPrefix):
		if payload[len(wakeFromPrefix):] == self {
			return 0, false, true
		}
		return 0, true, false
	case strings.HasPrefix(payload, wakeAggregatePrefix):
		key, err := strconv.ParseUint(payload[len(wakeAggregatePrefix):], 10, 32)
		if err == nil && n > 0 {
			return int(key % uint64(n)), false, false
		}
	}
	return 0, true, false
}

// notice is a notification to send once a transaction committed.
type notice struct{ channel, payload string }

// sendNotices sends notices in one statement, after the commit that they
// announce: a read-only NOTIFY commits without a WAL flush, where one in
// the writing transaction would hold Postgres' global notify lock through
// it. A forwarder's claimed round sends its publishers' notifications this
// way; a one-transaction round sends them with its commit
// (commitNotifying).
func sendNotices(ctx context.Context, db queue.DBTX, notices []notice) error {
	if len(notices) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, sendNoticesSQL, noticeArgs(notices)...)
	return err
}

// noticeArgs are sendNoticesSQL's arguments for notices: their channels
// and their payloads.
func noticeArgs(notices []notice) []any {
	channels, payloads := make([]string, len(notices)), make([]string, len(notices))
	for i, n := range notices {
		channels[i], payloads[i] = n.channel, n.payload
	}
	return []any{channels, payloads}
}

// commitNotifying commits the transaction open on conn and sends notices
// after it, in one round trip: COMMIT and the notices' statement go out as
// one pipeline, the statement running in a transaction of its own once the
// commit is done (a read-only NOTIFY, as sendNotices sends it; a COMMIT
// that fails skips it). err is the commit's failure: a transaction already
// aborted, whose COMMIT reports ROLLBACK, is pgx.ErrTxCommitRollback, and
// its notices go out anyway (a wake that finds nothing new; callers reach
// the commit only after every statement succeeded). noticeErr is the
// notices' own failure, after a commit that went through.
func commitNotifying(ctx context.Context, conn *pgx.Conn, notices []notice) (noticeErr, err error) {
	b := &pgx.Batch{}
	b.Queue("COMMIT")
	if len(notices) > 0 {
		b.Queue(sendNoticesSQL, noticeArgs(notices)...)
	}
	br := conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	if tag, err = br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	if tag.String() != "COMMIT" {
		// An aborted transaction's COMMIT reports ROLLBACK.
		_ = br.Close()
		return nil, pgx.ErrTxCommitRollback
	}
	if len(notices) > 0 {
		_, noticeErr = br.Exec()
	}
	if cerr := br.Close(); cerr != nil && noticeErr == nil {
		noticeErr = cerr
	}
	return noticeErr, nil
}

const sendNoticesSQL = `SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)`
