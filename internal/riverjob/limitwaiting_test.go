package riverjob_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// LimitWaiting answers for due pending jobs of the limit only: not for
// another limit's, not for one scheduled later, not for one admitted.
func TestLimitWaiting(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	waiting := func() bool {
		t.Helper()
		ok, err := riverjob.LimitWaiting(ctx, f.db.Pool, f.db.Schema, "l")
		require.NoError(t, err)
		return ok
	}
	meta := func(limit string) []byte {
		return []byte(`{"tributary_limit":"` + limit + `","tributary_limit_key":"k"}`)
	}
	require.False(t, waiting(), "no jobs")

	f.insert(t, fixtureArgs{N: 1}, &river.InsertOpts{Pending: true, Metadata: meta("other")})
	f.insert(t, fixtureArgs{N: 2}, &river.InsertOpts{Pending: true, Metadata: meta("l"), ScheduledAt: time.Now().Add(time.Hour)})
	f.insert(t, fixtureArgs{N: 3}, &river.InsertOpts{Metadata: meta("l")})
	require.False(t, waiting(), "another limit's, a later one's and an available one")

	due := f.insert(t, fixtureArgs{N: 4}, &river.InsertOpts{Pending: true, Metadata: meta("l")})
	require.True(t, waiting())

	f.finalize(t, due.ID, "cancelled")
	require.False(t, waiting())
}
