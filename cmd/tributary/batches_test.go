package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
)

// TestCLIBatches runs a real worker process with a file sink and small
// thresholds, stages items, and lists the objects with `batches list`.
func TestCLIBatches(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "objects")
	env := []string{
		"BATCH_SINK_URL=file://" + dir,
		"S3_BATCH_MAX_EVENTS=3",
		"S3_BATCH_TIMER_INTERVAL_MS=100",
	}

	res := cli(t, db, env, "batches", "list", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var empty struct {
		Streams []batch.StreamStatus `json:"streams"`
		Objects []batch.Object       `json:"objects"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &empty))
	require.Empty(t, empty.Streams)
	require.Empty(t, empty.Objects)

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	worker := exec.CommandContext(wctx, binPath, "worker", "--queues", "default=5,events=5")
	pgtest.DieWithTest(worker)
	worker.Env = baseEnv(db, env)
	var werr bytes.Buffer
	worker.Stderr = &werr
	require.NoError(t, worker.Start())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = worker.Process.Kill()
			_ = worker.Wait()
		}
	})

	stager, err := batch.NewStager(db.Client(t), batch.Config{Defaults: batch.StreamConfig{MaxEvents: 3}})
	require.NoError(t, err)
	for i := range 7 {
		require.NoError(t, stager.Stage(ctx, "cli_stream", []byte(fmt.Sprintf(`{"n":%d}`, i))))
	}
	pgtest.WaitFor(t, 30*time.Second, "two objects written by the worker process", func() (bool, error) {
		objs, err := batch.ListObjects(ctx, db.Pool, db.Schema, batch.ListObjectsParams{})
		written := 0
		for _, o := range objs {
			if o.Status == "written" {
				written++
			}
		}
		return written == 2, err
	})
	require.NoError(t, worker.Process.Signal(syscall.SIGTERM))
	require.NoError(t, worker.Wait(), werr.String())
	stopped = true

	res = cli(t, db, env, "batches", "list", "--stream", "cli_stream", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var list struct {
		Sink    string               `json:"sink"`
		Streams []batch.StreamStatus `json:"streams"`
		Objects []batch.Object       `json:"objects"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list), res.stdout)
	require.Len(t, list.Objects, 2)
	require.Len(t, list.Streams, 1)
	require.Equal(t, int64(1), list.Streams[0].StagedItems)
	for _, o := range list.Objects {
		require.Equal(t, 3, o.Items)
		require.FileExists(t, filepath.Join(dir, o.Key))
	}

	res = cli(t, db, env, "batches", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "cli_stream")
	require.Contains(t, res.stdout, ".jsonl.gz")

	res = cli(t, db, env, "batches", "list", "--stream", "no/slash")
	require.Equal(t, exitUsage, res.code)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, `"no/slash"`)

	res = cli(t, db, []string{"BATCH_SINK_URL=ftp://nope"}, "worker")
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "BATCH_SINK_URL")
}
