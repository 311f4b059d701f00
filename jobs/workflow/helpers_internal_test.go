package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// clientOn returns a workflow client on db's schema, for the internal
// tests that run no runtime.
func clientOn(t *testing.T, db *pgtest.DB) *Client {
	t.Helper()
	qc, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	return NewClient(qc)
}
