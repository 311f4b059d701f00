package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// TestForwarderClaimsGrowOverManyAggregates: a backlog of 1,200 events
// forwarded by one loop with ClaimSize 20 and MaxClaimSize 80. Spread over
// 1,200 aggregates (one event of each a claim), the claims grow to 80;
// over 2 aggregates (10 events of each a claim) they stay at 20, as
// they do with MaxClaimSize at ClaimSize. Both the one-transaction round
// (a transactional publisher) and the claimed round (a plain one); every
// event is published once, and the plain publisher sees each aggregate's
// events in emit order.
func TestForwarderClaimsGrowOverManyAggregates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		aggregates, maxClaim int
		tx                   bool
		wantLargest          int64
	}{
		{"spread, plain publisher", 1200, 80, false, 80},
		{"spread, transactional publisher", 1200, 80, true, 80},
		{"spread, MaxClaimSize at ClaimSize", 1200, 20, true, 20},
		{"dense, plain publisher", 2, 80, false, 20},
		{"dense, transactional publisher", 2, 80, true, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.New(t)
			em := newEmitter(t, db)
			const n = 1200
			var ids []string
			for i := 0; i < n; i += 400 {
				batch := make([]events.Emission, 400)
				for j := range batch {
					batch[j] = events.Emission{Def: noteEvent, Payload: noteV1{Text: fmt.Sprint(i + j)},
						Meta: events.Meta{AggregateID: fmt.Sprintf("agg-%d", (i+j)%tc.aggregates)}}
				}
				got, err := em.EmitMany(ctx, db.Pool, batch)
				require.NoError(t, err)
				ids = append(ids, got...)
			}
			watch, counting := newWatchPublisher(), &countingTx{counts: map[string]int{}}
			pub := outbox.Publisher(watch)
			if tc.tx {
				pub = counting
			}
			f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
				Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: []outbox.Publisher{pub},
				ClaimSize: 20, MaxClaimSize: tc.maxClaim, Concurrency: 1,
			})
			require.NoError(t, err)
			require.NoError(t, f.Start(ctx))
			t.Cleanup(func() { _ = f.Stop(context.Background()) })
			pgtest.WaitFor(t, 60*time.Second, "every row to be SENT", func() (bool, error) {
				var left int
				err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status <> 'SENT'`)).Scan(&left)
				return left == 0, err
			})
			require.Equal(t, tc.wantLargest, f.Stats().LargestClaim)
			require.Equal(t, int64(n), f.Stats().Forwarded)
			for _, id := range ids {
				if tc.tx {
					require.Equal(t, 1, counting.count(id), "event %s published once", id)
				} else {
					require.Equal(t, 1, watch.counts[id], "event %s published once", id)
				}
			}
			if !tc.tx {
				require.Equal(t, emitOrder(t, db), watch.byAgg, "each aggregate's events are published in emit order")
			}
		})
	}
}

// TestNextClaimSize: after a full claim over many aggregates the next one
// doubles, up to MaxClaimSize; it stays where it is when the claim held
// several events of each aggregate, had no aggregates, or its payloads
// doubled would pass 16 MiB; after a claim that was not full, or sent
// nothing, it is ClaimSize again.
func TestNextClaimSize(t *testing.T) {
	t.Parallel()
	f, err := events.NewForwarder(nil, events.ForwarderConfig{Publishers: []outbox.Publisher{newWatchPublisher()}, ClaimSize: 100, MaxClaimSize: 300})
	require.NoError(t, err)
	for _, tc := range []struct {
		name                                    string
		size, selected, sent, aggregates, bytes int
		want                                    int
	}{
		{"full, one event an aggregate", 100, 100, 100, 100, 10_000, 200},
		{"full, capped", 200, 200, 200, 200, 10_000, 300},
		{"full at the cap", 300, 300, 300, 300, 10_000, 300},
		{"full, 7 events an aggregate", 100, 100, 100, 15, 10_000, 200},
		{"full, 8 events an aggregate", 200, 200, 200, 25, 10_000, 200},
		{"full, no aggregates", 100, 100, 100, 0, 10_000, 100},
		{"full, large payloads", 100, 100, 100, 100, 9 << 20, 100},
		{"not full", 200, 150, 150, 150, 10_000, 100},
		{"full, nothing sent", 200, 200, 0, 0, 0, 100},
	} {
		require.Equal(t, tc.want, f.NextClaimSize(tc.size, tc.selected, tc.sent, tc.aggregates, tc.bytes), tc.name)
	}
	_, err = events.NewForwarder(nil, events.ForwarderConfig{Publishers: []outbox.Publisher{newWatchPublisher()}, ClaimSize: 100, MaxClaimSize: 50})
	require.ErrorContains(t, err, "MaxClaimSize 50 must be at least ClaimSize 100")
	f, err = events.NewForwarder(nil, events.ForwarderConfig{Publishers: []outbox.Publisher{newWatchPublisher()}, ClaimSize: 100})
	require.NoError(t, err)
	require.Equal(t, 200, f.NextClaimSize(100, 100, 100, 100, 0))
	require.Equal(t, 400, f.NextClaimSize(400, 400, 400, 400, 0), "MaxClaimSize defaults to 4 times ClaimSize")
}
