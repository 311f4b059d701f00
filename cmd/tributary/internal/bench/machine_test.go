package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestProbeMachine times real round trips to Postgres and prints them.
func TestProbeMachine(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	m, err := ProbeMachine(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Positive(t, m.RTT)
	require.NotEmpty(t, m.LoadAvg)
	line := m.String()
	require.True(t, strings.HasPrefix(line, "machine: load average "+m.LoadAvg+", Postgres round trip"), line)
}
