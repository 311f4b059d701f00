package workflow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestDiamondOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Insert(ctx, diamond("diamond", nil))
	require.NoError(t, err)
	require.Len(t, res.Jobs, 4)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: 4}, d.Counts)
	a := outputOf(t, taskByName(t, d, "a"))
	bo := outputOf(t, taskByName(t, d, "b"))
	require.JSONEq(t, string(mustJSON(t, a)), string(bo.Read["a"]), "b read a's output")
	do := outputOf(t, taskByName(t, d, "d"))
	require.Len(t, do.Read, 2)
	require.Empty(t, do.Missing)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
