package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

type wakeNote struct {
	Text string `json:"text"`
}

// TestEmitWakesTheAggregatesLoop: an emit of one aggregate's rows wakes
// the forward loop whose share claims them (the claim's own share key),
// an emit of several aggregates or of rows without one wakes every loop,
// and a forwarder ignores its own wake of the others.
func TestEmitWakesTheAggregatesLoop(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	def := Define[wakeNote]("test.wake_note", nil)
	reg, err := NewRegistry(def)
	require.NoError(t, err)
	em, err := NewEmitter(EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)

	conn, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{notifyChannel(db.Schema)}.Sanitize())
	require.NoError(t, err)
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}

	for _, agg := range []string{"order-1", "order-2", "customer-77", "ß"} {
		_, err := em.Emit(ctx, db.Pool, def, wakeNote{Text: agg}, Meta{AggregateID: agg})
		require.NoError(t, err)
		payload := next()
		for _, n := range []int{1, 2, 3, 8} {
			var share int
			require.NoError(t, db.Pool.QueryRow(ctx, fmt.Sprintf("SELECT %s %% $2::int", shareKeySQL("$1::text")), agg, n).Scan(&share))
			loop, all, none := wakeLoops(payload, "me", n)
			require.False(t, all || none, "payload %q", payload)
			require.Equal(t, share, loop, "aggregate %s, %d loops", agg, n)
		}
	}

	_, err = em.EmitMany(ctx, db.Pool, []Emission{
		{Def: def, Payload: wakeNote{Text: "1"}, Meta: Meta{AggregateID: "a"}},
		{Def: def, Payload: wakeNote{Text: "2"}, Meta: Meta{AggregateID: "b"}},
	})
	require.NoError(t, err)
	_, all, _ := wakeLoops(next(), "me", 2)
	require.True(t, all, "two aggregates wake every loop")

	_, err = em.EmitMany(ctx, db.Pool, []Emission{
		{Def: def, Payload: wakeNote{Text: "1"}, Meta: Meta{AggregateID: "a"}},
		{Def: def, Payload: wakeNote{Text: "2"}},
	})
	require.NoError(t, err)
	_, all, _ = wakeLoops(next(), "me", 2)
	require.True(t, all, "a row without an aggregate wakes every loop")

	for _, tt := range []struct {
		payload string
		all     bool
		none    bool
	}{
		{"", true, false},
		{wakeFromPrefix + "me", false, true},
		{wakeFromPrefix + "other", true, false},
		{wakeAggregatePrefix + "x", true, false},
	} {
		_, all, none := wakeLoops(tt.payload, "me", 2)
		require.Equal(t, tt.all, all, "payload %q", tt.payload)
		require.Equal(t, tt.none, none, "payload %q", tt.payload)
	}
}
