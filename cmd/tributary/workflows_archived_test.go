package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestCLIWorkflowsArchived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	res := cli(t, db, nil, "workflows", "archived")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "no objects")

	stager, err := batch.NewStager(db.Client(t), batch.Config{})
	require.NoError(t, err)
	require.NoError(t, stager.Stage(ctx, workflow.ArchiveStream, []byte(`{"workflow":{"id":"x"}}`)))
	res = cli(t, db, nil, "workflows", "archived", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var out struct {
		Stream string               `json:"stream"`
		Staged []batch.StreamStatus `json:"staged"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, workflow.ArchiveStream, out.Stream)
	require.Len(t, out.Staged, 1)
	require.EqualValues(t, 1, out.Staged[0].StagedItems)

	// An object the archive clean-up recorded.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	now := time.Now()
	_, err = batch.RecordObjectTx(ctx, tx, db.Schema, batch.Object{BatchID: uuid.New(), Stream: workflow.ArchiveStream,
		Key: "tributary.workflows/dt=2026-01-01/hour=00/x.jsonl.gz", Items: 7, Bytes: 700, CompressedBytes: 100, FirstItemAt: now, LastItemAt: now})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	res = cli(t, db, nil, "workflows", "archived")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "tributary.workflows/dt=2026-01-01/hour=00/x.jsonl.gz")
	require.Regexp(t, `written\s+7\s+700\s+100`, res.stdout)
}
