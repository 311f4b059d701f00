package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// TestCommitNotifying: the forwarder's commit and its notifications in one
// round trip. A commit that goes through sends them after it (a listener
// that gets one finds the row committed); a commit that fails sends
// nothing and leaves nothing; a transaction Postgres had aborted reports
// pgx.ErrTxCommitRollback.
func TestCommitNotifying(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(`CREATE TABLE /*schema*/commit_notifying (
        id int PRIMARY KEY,
        parent int REFERENCES /*schema*/commit_notifying (id) DEFERRABLE INITIALLY DEFERRED)`))
	require.NoError(t, err)

	listener, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer listener.Close(ctx)
	channel := notifyChannel(db.Schema)
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	wait := func(d time.Duration) (string, error) {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			return "", err
		}
		return n.Payload, nil
	}
	exists := func(id int) bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/commit_notifying WHERE id = $1`), id).Scan(&n))
		return n == 1
	}
	run := func(write func(tx pgx.Tx) error, notices ...notice) (noticeErr, err error) {
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_ = write(tx)
		return commitNotifying(ctx, conn.Conn(), notices)
	}

	noticeErr, err := run(func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, db.Q(`INSERT INTO /*schema*/commit_notifying (id) VALUES (1)`))
		return err
	}, notice{channel, "one"}, notice{channel, "two"})
	require.NoError(t, err)
	require.NoError(t, noticeErr)
	for _, want := range []string{"one", "two"} {
		got, err := wait(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.True(t, exists(1), "committed before the notices went out")

	// A deferred foreign key fails at COMMIT: nothing written, no notice.
	_, err = run(func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, db.Q(`INSERT INTO /*schema*/commit_notifying (id, parent) VALUES (2, 99)`))
		return err
	}, notice{channel, "after a failed commit"})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23503", pgErr.Code, "the foreign key's violation at COMMIT")
	require.False(t, exists(2))
	_, err = wait(500 * time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no notice after a failed commit")

	// A statement failed inside: the COMMIT reports ROLLBACK.
	_, err = run(func(tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, db.Q(`INSERT INTO /*schema*/commit_notifying (id) VALUES (3)`))
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return err
	})
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
	require.False(t, exists(3))

	// Without notices it is a plain commit.
	noticeErr, err = run(func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, db.Q(`INSERT INTO /*schema*/commit_notifying (id) VALUES (4)`))
		return err
	})
	require.NoError(t, err)
	require.NoError(t, noticeErr)
	require.True(t, exists(4))
}
