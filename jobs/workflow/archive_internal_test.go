package workflow

import (
	"bufio"
	"bytes"
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

// archiveS3 is a real S3 HTTP server (gofakes3) with a bucket "archive",
// and a sink on it under the prefix "wf".
func archiveS3(t *testing.T) *batch.BlobSink {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("archive"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	sink, err := batch.OpenSink(context.Background(), fmt.Sprintf("s3://archive/wf?endpoint=http://%s&region=us-east-1", ln.Addr()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	return sink
}

// archiveObjects reads every object of the sink back: its lines by key.
func archiveObjects(t *testing.T, sink *batch.BlobSink) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	it := sink.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data, err := sink.Bucket().ReadAll(ctx, obj.Key)
		require.NoError(t, err)
		zr, err := gzip.NewReader(bytes.NewReader(data))
		require.NoError(t, err)
		sc := bufio.NewScanner(zr)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		lines := []string{}
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		require.NoError(t, sc.Err())
		out[obj.Key] = lines
	}
	return out
}

// seedFinished inserts n workflows that finished 40 days ago, each with a
// task and its output, a step record, a signal and an attribute, and one
// that finished yesterday, which stays.
func seedFinished(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`
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
}

// archiveCleaner is a Cleaner of target whose batches keep their size (no
// statement timeout, no adaptation to the batch time), so the batches a
// test sees are the batch size it asks for.
func archiveCleaner(t *testing.T, db *pgtest.DB, target queue.CleanupTarget) *scheduler.Cleaner {
	t.Helper()
	cleaner, err := scheduler.NewCleaner(db.Client(t), scheduler.CleanerConfig{Targets: []queue.CleanupTarget{target},
		StatementTimeout: -1, TargetBatchTime: time.Hour, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	return cleaner
}

// TestArchiveCleanup archives 10,000 finished workflows past retention
// into a real S3 HTTP server (gofakes3): each batch's object is in S3
// while the batch's rows are still there, and the rows go in the
// transaction that records the object. The second batch dies between its
// write and its delete: its rows stay, and the next run writes the same
// key again, so S3 ends with one object per recorded object and every
// workflow on exactly one line.
func TestArchiveCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	sink := archiveS3(t)
	const n, batchSize = 10_000, 1000
	seedFinished(t, db, n)
	count := func(sql string) int {
		var c int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(sql)).Scan(&c))
		return c
	}

	var writes []string
	crashed := errors.New("the process died between the write and the delete")
	target := archiveCleanup(sink, ArchiveStream, func(key string) error {
		writes = append(writes, key)
		// The object is in S3 and the batch's rows are all still there
		// (read from another connection: nothing is deleted yet).
		ok, err := sink.Bucket().Exists(ctx, key)
		require.NoError(t, err)
		require.True(t, ok, "object %s is written before the delete", key)
		committed := len(writes) - 1 // the batches before this one
		if len(writes) > 2 {
			committed-- // the crashed one
		}
		require.Equal(t, n+1-batchSize*committed, count(`SELECT count(*) FROM /*schema*/tributary_workflow`),
			"no row of write %d's batch is deleted before its object exists", len(writes))
		if len(writes) == 2 {
			return crashed
		}
		return nil
	})
	cleaner := archiveCleaner(t, db, target)
	first, err := cleaner.Clean(ctx, "workflows", RetentionDefault, batchSize)
	require.ErrorIs(t, err, crashed)
	require.EqualValues(t, batchSize, first.Deleted, "the first batch committed before the crash")
	require.EqualValues(t, n+1-batchSize, count(`SELECT count(*) FROM /*schema*/tributary_workflow`), "the crashed batch's rows stay")
	require.Len(t, archiveObjects(t, sink), 2, "the first batch's object and the crashed batch's")
	require.Equal(t, 1, count(`SELECT count(*) FROM /*schema*/tributary_batch_object`), "the crashed batch's object is not recorded")
	crashedKey := writes[1]

	res, err := cleaner.Clean(ctx, "workflows", RetentionDefault, batchSize)
	require.NoError(t, err)
	require.EqualValues(t, n-batchSize, res.Deleted)
	require.Equal(t, crashedKey, writes[2], "the retry writes the crashed batch's key again")
	require.Equal(t, 1, count(`SELECT count(*) FROM /*schema*/tributary_workflow`), "the one within retention stays")

	objects := archiveObjects(t, sink)
	recorded, err := batch.ListObjects(ctx, db.Pool, db.Schema, batch.ListObjectsParams{Stream: ArchiveStream, Limit: 100})
	require.NoError(t, err)
	require.Len(t, objects, n/batchSize, "one object per batch: no second copy of the crashed batch")
	require.Len(t, recorded, len(objects))
	lines := 0
	for _, o := range recorded {
		require.Equal(t, "written", o.Status)
		require.Contains(t, objects, o.Key, "recorded object %s is in S3", o.Key)
		require.Len(t, objects[o.Key], o.Items, "object %s", o.Key)
		require.True(t, strings.HasPrefix(o.Key, "wf/"+ArchiveStream+"/dt="), o.Key)
		require.Positive(t, o.CompressedBytes)
	}
	seen := map[string]int{}
	for _, ls := range objects {
		for _, l := range ls {
			lines++
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
	}
	require.Equal(t, n, lines, "one line per workflow")
	require.Len(t, seen, n, "every workflow is archived")
	for id, c := range seen {
		require.Equal(t, 1, c, "workflow %s is archived once", id)
	}
	t.Logf("%d workflows archived as %d lines in %d S3 objects (%d recorded); %d writes, the crashed batch's key written twice (%s); rows left: %d",
		len(seen), lines, len(objects), len(recorded), len(writes), crashedKey, count(`SELECT count(*) FROM /*schema*/tributary_workflow`))
}

// TestArchiveCleanupRetrySmaller: a batch that dies after its write is
// retried with a smaller batch size (a statement timeout halves it): the
// retry's batch starts at the same workflow, so it overwrites the same key
// with fewer lines, and the rest go to later objects, each once.
func TestArchiveCleanupRetrySmaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	sink := archiveS3(t)
	const n = 30
	seedFinished(t, db, n)

	var writes []string
	crashed := errors.New("crash")
	target := archiveCleanup(sink, ArchiveStream, func(key string) error {
		writes = append(writes, key)
		if len(writes) == 1 {
			return crashed
		}
		return nil
	})
	cleaner := archiveCleaner(t, db, target)
	_, err := cleaner.Clean(ctx, "workflows", RetentionDefault, 10)
	require.ErrorIs(t, err, crashed)
	require.Len(t, archiveObjects(t, sink)[writes[0]], 10)
	res, err := cleaner.Clean(ctx, "workflows", RetentionDefault, 4)
	require.NoError(t, err)
	require.EqualValues(t, n, res.Deleted)
	require.Equal(t, writes[0], writes[1], "the retry overwrites the crashed batch's key")

	objects := archiveObjects(t, sink)
	require.Len(t, objects, (n+3)/4)
	require.Len(t, objects[writes[0]], 4, "the crashed batch's object holds the retry's batch only")
	seen := map[string]int{}
	for _, ls := range objects {
		for _, l := range ls {
			var a struct {
				Workflow struct {
					ID string `json:"id"`
				} `json:"workflow"`
			}
			require.NoError(t, json.Unmarshal([]byte(l), &a))
			seen[a.Workflow.ID]++
		}
	}
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, "workflow %s is archived once", id)
	}
}
