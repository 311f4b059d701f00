package riverjob_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
)

func TestConnectionError(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("completing: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"session terminated", pg("57P01"), true},
		{"server crashed", pg("57P02"), true},
		{"server starting", pg("57P03"), true},
		{"connection exception", pg("08006"), true},
		{"too many connections", pg("53300"), true},
		{"unique violation", pg("23505"), false},
		{"syntax error", pg("42601"), false},
		{"socket closed", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), false},
		{"other", errors.New("encoding the outcome"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, riverjob.ConnectionError(tt.err))
		})
	}

	// The real thing: a session terminated by pg_terminate_backend.
	db := pgtest.New(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err)
	require.True(t, riverjob.ConnectionError(err), "%v", err)
}

func TestNotRunHereWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		metadata string
		wait     time.Duration
		first    bool
	}{
		{`{}`, time.Second, true},
		{`{"snoozes": 1}`, 2 * time.Second, false},
		{`{"snoozes": 5}`, 32 * time.Second, false},
		{`{"snoozes": 6}`, time.Minute, false},
		{`{"snoozes": 1000}`, time.Minute, false},
		{`{"snoozes": -3}`, time.Second, true},
		{`not json`, time.Second, true},
	} {
		wait, first := riverjob.NotRunHereWait([]byte(tc.metadata))
		require.Equal(t, tc.wait, wait, tc.metadata)
		require.Equal(t, tc.first, first, tc.metadata)
	}
}
