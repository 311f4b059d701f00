package events

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/outbox"
)

// TestLaneHotPathUpdatesStayOnTheirPage: the two updates every ordered
// event makes to its lane's row, the bus's reservation into a busy lane and
// the group commit's advance that leaves it busy, change no indexed column
// (updated_at is left alone: by the reservation of a busy lane, and by the
// advance while it is recent; waiting stays true), so Postgres makes them
// HOT; the reservation that turns an idle lane busy and the advance that
// makes a lane idle are not, and the advance writes a stale updated_at.
func TestLaneHotPathUpdatesStayOnTheirPage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	l := newLanes(db.Schema)
	key := laneKey{"c", "a"}

	// In one transaction, whose own counts pg_stat_get_xact_* returns.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	counts := func() (updated, hot int64) {
		require.NoError(t, tx.QueryRow(ctx, db.Q(`SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'tributary_event_lane'`), db.Schema).Scan(&updated, &hot))
		return updated, hot
	}
	reserve := func(n int64) {
		_, err := l.reserve(ctx, tx, map[laneKey]int64{key: n})
		require.NoError(t, err)
	}
	advance := func(from, to int64) {
		b := &pgx.Batch{}
		l.queueAdvanceMany(b, []riverjob.LaneSeq{{Consumer: "c", AggregateID: "a", Seq: from}}, []int64{to}, time.Now().UTC())
		require.NoError(t, tx.SendBatch(ctx, b).Close())
	}

	reserve(3) // created: head 1, last 3
	reserve(2) // busy, last 5: HOT
	advance(1, 2)
	advance(2, 3) // both HOT
	updated, hot := counts()
	require.Equal(t, int64(3), updated)
	require.Equal(t, int64(3), hot, "a busy lane's reservation and advances are HOT")

	advance(3, 6) // idle now: waiting turns false, not HOT
	reserve(1)    // busy again: not HOT
	updated, hot = counts()
	require.Equal(t, int64(5), updated)
	require.Equal(t, int64(3), hot, "a lane turning idle or busy changes its waiting index")

	reserve(1) // head 6, last 7: busy
	_, err = tx.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_event_lane SET updated_at = updated_at - interval '1 minute'`))
	require.NoError(t, err)
	var before time.Time
	require.NoError(t, tx.QueryRow(ctx, db.Q(`SELECT updated_at FROM /*schema*/tributary_event_lane`)).Scan(&before))
	advance(6, 7)
	var after time.Time
	require.NoError(t, tx.QueryRow(ctx, db.Q(`SELECT updated_at FROM /*schema*/tributary_event_lane`)).Scan(&after))
	require.Greater(t, after.Sub(before), 50*time.Second, "an advance writes an updated_at older than laneTouchEvery")
}

// TestLaneEventClaimsStayOnTheirPage: a chain's claim of a lane event
// writes only claimed_by and claimed_at, which no index covers, so each
// claim is a HOT update as long as the event's page has room for the new
// version. The bus writes a forward round's lane events in one statement,
// so without free space kept on each page (fillfactor) every full page's
// claims went to other pages, each with a new primary-key entry.
func TestLaneEventClaimsStayOnTheirPage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	l := newLanes(db.Schema)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	// 200 idle lanes, each with one lane event at its head, written as the
	// bus writes them: one statement for the round.
	const n = 200
	counts := map[laneKey]int64{}
	evs := make([]laneEvent, 0, n)
	claims := make([]riverjob.LaneClaim, 0, n)
	for i := range n {
		agg := fmt.Sprintf("order-%04d", i)
		counts[laneKey{"c", agg}] = 1
		ev, err := newLaneEvent(dispatchArgs{Consumer: "c", AggregateID: agg, Seq: 1, Event: outbox.Event{
			ID: fmt.Sprintf("01J0000000000000000000%04d", i), EventType: "order.created", EventVersion: 1, EventKind: "domain",
			AggregateID: agg, Payload: json.RawMessage(`{"order_id":"` + agg + `","amount":1250,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`),
			SourceService: "orders", CreatedAt: time.Now().UTC()}}, "events", 25)
		require.NoError(t, err)
		evs = append(evs, ev)
		claims = append(claims, riverjob.LaneClaim{LaneSeq: ev.LaneSeq, Events: 1})
	}
	_, err = l.reserve(ctx, tx, counts)
	require.NoError(t, err)
	require.NoError(t, l.insertEvents(ctx, tx, evs))

	b := &pgx.Batch{}
	got := make([][]riverjob.Claimed, n)
	// A process id as long as the runtime's (host, pid and a token).
	var promoted []string
	riverjob.QueueClaimAtHead(b, db.Schema, claims, "tributary-worker-host-12345-0123abcd", time.Now().UTC(), got, &promoted)
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	for i := range got {
		require.Len(t, got[i], 1, "lane %d's event is claimed", i)
	}

	var updated, hot int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'tributary_event_lane_event'`, db.Schema).Scan(&updated, &hot))
	require.Equal(t, int64(n), updated)
	require.Equal(t, updated, hot, "every lane event's claim is HOT")
}
