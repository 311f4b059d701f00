package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestControlUnstorableName: a name Postgres cannot take as text (NUL,
// invalid UTF-8), from the CLI or the dashboard, is an unknown schedule,
// not a database error.
func TestControlUnstorableName(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	client := db.Client(t)
	ctx := context.Background()
	for _, name := range []string{"\x00", "nightly\x00", "\xff"} {
		require.ErrorIs(t, Pause(ctx, client, name), ErrNotFound, "%q", name)
		require.ErrorIs(t, Resume(ctx, client, name), ErrNotFound, "%q", name)
		_, err := Trigger(ctx, client, name, TriggerOpts{})
		require.ErrorIs(t, err, ErrNotFound, "%q", name)
	}
}
