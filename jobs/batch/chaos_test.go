//go:build chaos

package batch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestChaosWorkerKilledAfterUpload kills a real worker process (SIGKILL)
// after its object reached the S3 server and before it could commit. River
// rescues the stuck job, the retry writes the same key again, and every item
// is in exactly one object. It waits for River's job rescuer (every 30 s),
// so it is built only with the chaos tag (`make chaos`), not in `make test`.
func TestChaosWorkerKilledAfterUpload(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	stager, err := NewStager(db.Client(t), chaosStreams)
	require.NoError(t, err)
	const n = 30
	for i := 0; i < n; i += 10 {
		var p [][]byte
		for j := i; j < i+10; j++ {
			p = append(p, item("killed", j))
		}
		require.NoError(t, stager.Stage(ctx, "killed", p...))
	}

	// The S3 server kills the worker once the first object is stored,
	// before the worker sees the response.
	srv := startS3(t)
	var (
		mu     sync.Mutex
		child  *exec.Cmd
		killed bool
		puts   = map[string]int{}
	)
	inner := srv.handler
	srv.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, ".jsonl.gz") {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		mu.Lock()
		puts[strings.TrimPrefix(r.URL.Path, "/"+testBucket+"/")]++
		if !killed && child != nil && rec.Code == http.StatusOK {
			killed = true
			_ = child.Process.Signal(syscall.SIGKILL)
			mu.Unlock()
			return
		}
		mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
	srv.stop()
	srv.restart(t)
	sink, err := OpenSink(ctx, srv.url(""))
	require.NoError(t, err)

	// The leader (started first, so the child is not) runs River's rescuer;
	// it knows the flush kind but works another queue.
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{
		Queues:               map[string]int{"chaos_idle": 1},
		RescueStuckJobsAfter: 2 * time.Second,
		JobTimeout:           time.Second,
	}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: chaosStreams, Sink: sink, JobTimeout: time.Second}, AgeTimerConfig{Interval: time.Hour})
		require.NoError(t, err)
	})

	mu.Lock()
	child = exec.Command(os.Args[0], "-test.run=^$")
	pgtest.DieWithTest(child)
	child.Env = append(os.Environ(), childEnv+"=1", "CHILD_DATABASE_URL="+db.URL, "CHILD_SCHEMA="+db.Schema, "CHILD_SINK_URL="+srv.url(""))
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	mu.Unlock()
	t.Cleanup(func() { _ = child.Process.Kill() })
	err = child.Wait()
	require.Error(t, err, "the worker process was killed")
	mu.Lock()
	require.True(t, killed)
	var firstKey string
	for k := range puts {
		firstKey = k
	}
	mu.Unlock()

	b := &testBundle{db: db, sink: sink}
	require.Equal(t, n, b.stagedCount(t, "killed"), "the killed flush committed nothing")
	var status string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT status FROM /*schema*/tributary_batch_object WHERE key = $1`), firstKey).Scan(&status))
	require.Equal(t, "claimed", status)

	// A new worker; the rescuer makes the stuck job retryable.
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: chaosStreams, Sink: sink, JobTimeout: time.Second, RetryBase: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}, AgeTimerConfig{Interval: time.Hour})
		require.NoError(t, err)
	})
	b.waitWritten(t, "killed", n, 90*time.Second)
	b.checkExactlyOnce(t, "killed", n)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, puts[firstKey], "the retry wrote the killed flush's key again")
	require.Len(t, puts, 3)
}
