package events

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/outbox"
)

// TestBusInsertWritesWhatRiverWrites: the bus's own insert of its dispatch
// jobs (args encoded by hand, one INSERT below busCopyFrom jobs, COPY from
// there) writes the rows River's InsertManyTx and InsertManyFastTx wrote
// for the same params: lone and batched dispatches, a lane's pending jobs,
// its head with the lane-turn metadata, a consumer's max attempts (past
// the smallint column's range too).
func TestBusInsertWritesWhatRiverWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := func(i int, aggregate string) outbox.Event {
		return outbox.Event{ID: fmt.Sprintf("ev-%d", i), EventType: "order.placed", EventVersion: 1, EventKind: "domain",
			AggregateID: aggregate, Payload: json.RawMessage(fmt.Sprintf(`{"n": %d, "html": "<a&b>"}`, i)),
			Metadata:  outbox.Metadata{CorrelationID: "c-1", Extra: map[string]string{"k": "v"}},
			CreatedAt: time.Date(2026, 12, 3, 6, 0, 0, i*1000, time.UTC)}
	}
	params := func(n int) []river.InsertManyParams {
		var ps []river.InsertManyParams
		for i := 0; len(ps) < n; i++ {
			switch i % 4 {
			case 0:
				ps = append(ps, river.InsertManyParams{Args: dispatchArgs{Consumer: "c1", Event: ev(i, "")},
					InsertOpts: &river.InsertOpts{Queue: "events", MaxAttempts: 3}})
			case 1:
				ps = append(ps, river.InsertManyParams{Args: dispatchBatchArgs{Consumer: "c1", Events: []outbox.Event{ev(i, ""), ev(i+1, "")}},
					InsertOpts: &river.InsertOpts{Queue: "events", MaxAttempts: 3}})
			case 2:
				ps = append(ps, river.InsertManyParams{Args: dispatchArgs{Consumer: "c2", AggregateID: "a", Seq: int64(i), Event: ev(i, "a")},
					InsertOpts: &river.InsertOpts{Queue: "default", MaxAttempts: 11, Pending: true}})
			case 3:
				ps = append(ps, river.InsertManyParams{Args: dispatchArgs{Consumer: "c2", AggregateID: "b", Seq: 1, Event: ev(i, "b")},
					InsertOpts: &river.InsertOpts{Queue: "default", Metadata: laneTurnMetadata, MaxAttempts: 1 << 20}})
			}
		}
		return ps
	}
	for _, n := range []int{1, 7, busCopyFrom + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			own, viaRiver := pgtest.New(t), pgtest.New(t)
			bus, err := newBus(own.Client(t))
			require.NoError(t, err)
			require.NoError(t, pgx.BeginFunc(ctx, own.Pool, func(tx pgx.Tx) error {
				return bus.insert(ctx, tx, params(n), nil)
			}))
			rc := viaRiver.Client(t).River()
			require.NoError(t, pgx.BeginFunc(ctx, viaRiver.Pool, func(tx pgx.Tx) error {
				if n >= busCopyFrom {
					_, err := rc.InsertManyFastTx(ctx, tx, params(n))
					return err
				}
				_, err := rc.InsertManyTx(ctx, tx, params(n))
				return err
			}))
			want := viaRiver.JobRows(t)
			require.Len(t, want, n)
			require.Equal(t, want, own.JobRows(t))
		})
	}

	t.Run("RefusesABadQueue", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		bus, err := newBus(db.Client(t))
		require.NoError(t, err)
		err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return bus.insert(ctx, tx, []river.InsertManyParams{{Args: dispatchArgs{Consumer: "c", Event: ev(1, "")},
				InsertOpts: &river.InsertOpts{Queue: "Bad Queue"}}}, nil)
		})
		require.ErrorContains(t, err, `invalid queue name "Bad Queue"`)
	})
}
