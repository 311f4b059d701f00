package workflow

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// TestMain points the S3 sink of TestArchiveCleanup at test credentials
// from the environment, never this machine's files or an instance metadata
// service.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "tributary-test",
		"AWS_SECRET_ACCESS_KEY":       "tributary-test-secret",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Exit(m.Run())
}

// TestArchiveCleanup archives 10,000 finished workflows past retention
// into a real S3 HTTP server (gofakes3) through the batch flushes. The
// second batch dies between its write (the staging) and its delete: its
// transaction never commits, so neither happened, and the next run archives
// those workflows once.
func TestArchiveCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const n, batchSize = 10_000, 1000

	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("archive"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	sink, err := batch.OpenSink(ctx, fmt.Sprintf("s3://archive/wf?endpoint=http://%s&region=us-east-1", ln.Addr()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })

	streams := batch.Config{Streams: map[string]batch.StreamConfig{ArchiveStream: {MaxEvents: 2000, MaxAge: time.Second}}}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := batch.Register(rt, batch.FlusherConfig{Streams: streams, Sink: sink, Logger: pgtest.Logger(t)},
			batch.AgeTimerConfig{Streams: streams, Interval: 500 * time.Millisecond})
		require.NoError(t, err)
	})
	stager, err := batch.NewStager(rt.Client, streams)
	require.NoError(t, err)

	// 10,000 workflows that finished 40 days ago, each with a task and its
	// output, a step record, a signal and an attribute; and one that
	// finished yesterday, which stays.
	_, err = db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_workflow (id, name, status, task_count, tasks_pending, tasks_active, tasks_completed,
    tasks_failed, tasks_cancelled, tasks_skipped, created_at, updated_at, finished_at)
SELECT (lpad(to_hex(i), 12, '0') || '7000' || '8000' || lpad(to_hex(i), 12, '0'))::uuid, 'archived', 'completed', 1, 0, 0, 1, 0, 0, 0,
    now() - CASE WHEN i > $1 THEN interval '1 day' ELSE interval '40 days' END, now(),
    now() - CASE WHEN i > $1 THEN interval '1 day' ELSE interval '40 days' END
FROM generate_series(1, $1 + 1) i;
INSERT INTO /*schema*/tributary_workflow_task (workflow_id, name, position, kind, args, queue, priority, max_attempts, tags, metadata,
    deps, dependents, pending_deps, failed_deps, on_dep_failure, state, job_id, run, attempts, errors, output, created_at, updated_at)
SELECT id, 'only', 0, 'k', '{}', 'default', 1, 25, '{}', '{}', '{}', '{}', 0, 0, 'cancel', 'completed', 1, 1, 1, '[]',
    jsonb_build_object('n', id), created_at, created_at FROM /*schema*/tributary_workflow;
INSERT INTO /*schema*/tributary_workflow_step (job_id, name, workflow_id, task, kind, output, done, created_at)
SELECT row_number() OVER (), 'charge', id, 'only', 'step', '"ok"', true, created_at FROM /*schema*/tributary_workflow;
INSERT INTO /*schema*/tributary_workflow_signal (workflow_id, name, payload, created_at, consumed_at)
SELECT id, 'approve', '{"by":"ana"}', created_at, created_at FROM /*schema*/tributary_workflow;
INSERT INTO /*schema*/tributary_workflow_attribute (workflow_id, key, value)
SELECT id, 'customer', 'c-' || id FROM /*schema*/tributary_workflow;
ANALYZE /*schema*/tributary_workflow;`), pgx.QueryExecModeSimpleProtocol, n)
	require.NoError(t, err)

	batches := 0
	crashed := errors.New("the process died between the write and the delete")
	target := archiveCleanup(stager, ArchiveStream, func() error {
		batches++
		if batches == 2 {
			return crashed
		}
		return nil
	})
	cleaner, err := scheduler.NewCleaner(rt.Client, scheduler.CleanerConfig{Targets: []queue.CleanupTarget{target}})
	require.NoError(t, err)
	first, err := cleaner.Clean(ctx, "workflows", RetentionDefault, batchSize)
	require.ErrorIs(t, err, crashed)
	require.Positive(t, first.Deleted, "the first batch committed before the crash")
	count := func(sql string) int {
		var c int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(sql)).Scan(&c))
		return c
	}
	require.EqualValues(t, n+1-first.Deleted, count(`SELECT count(*) FROM /*schema*/tributary_workflow`), "the first batch only")
	res, err := cleaner.Clean(ctx, "workflows", RetentionDefault, batchSize)
	require.NoError(t, err)
	require.EqualValues(t, n-first.Deleted, res.Deleted)
	require.Equal(t, 1, count(`SELECT count(*) FROM /*schema*/tributary_workflow`), "the one within retention stays")

	var lines []string
	pgtest.WaitFor(t, 2*time.Minute, "the archive to be flushed to S3", func() (bool, error) {
		lines = lines[:0]
		it := sink.Bucket().List(nil)
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return false, err
			}
			data, err := sink.Bucket().ReadAll(ctx, obj.Key)
			if err != nil {
				return false, err
			}
			zr, err := gzip.NewReader(strings.NewReader(string(data)))
			if err != nil {
				return false, err
			}
			sc := bufio.NewScanner(zr)
			sc.Buffer(make([]byte, 1<<20), 64<<20)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
		}
		return len(lines) >= n, nil
	})
	seen := map[string]int{}
	for _, l := range lines {
		var a struct {
			Workflow struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"workflow"`
			Tasks []struct {
				Output json.RawMessage `json:"output"`
			} `json:"tasks"`
			Steps      []json.RawMessage `json:"steps"`
			Signals    []json.RawMessage `json:"signals"`
			Attributes map[string]string `json:"attributes"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &a))
		seen[a.Workflow.ID]++
		require.Equal(t, "archived", a.Workflow.Name)
		require.Len(t, a.Tasks, 1)
		require.JSONEq(t, fmt.Sprintf(`{"n":%q}`, a.Workflow.ID), string(a.Tasks[0].Output))
		require.Len(t, a.Steps, 1)
		require.Len(t, a.Signals, 1)
		require.Equal(t, "c-"+a.Workflow.ID, a.Attributes["customer"])
	}
	require.Len(t, seen, n, "every workflow is archived")
	for id, c := range seen {
		require.Equal(t, 1, c, "workflow %s is archived once", id)
	}
	objects, err := batch.ListObjects(ctx, db.Pool, db.Schema, batch.ListObjectsParams{Stream: ArchiveStream, Limit: 100})
	require.NoError(t, err)
	t.Logf("%d workflows archived in %d objects of stream %s (%d lines in S3), rows left: %d", len(seen), len(objects), ArchiveStream, len(lines),
		count(`SELECT count(*) FROM /*schema*/tributary_workflow`))
}
