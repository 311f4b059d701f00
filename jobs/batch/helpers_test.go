package batch

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

func TestMain(m *testing.M) {
	// The S3 sink reads credentials the usual way, from the environment;
	// never from this machine's files or an instance metadata service.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "tributary-test",
		"AWS_SECRET_ACCESS_KEY":       "tributary-test-secret",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChildWorker())
	}
	os.Exit(m.Run())
}

// s3Server is a real S3 HTTP server (gofakes3) on 127.0.0.1 that can be
// stopped and started again on the same address with the same contents.
type s3Server struct {
	backend *s3mem.Backend
	handler http.Handler
	addr    string

	mu  sync.Mutex
	srv *http.Server
}

const testBucket = "tributary-batches"

func startS3(t *testing.T) *s3Server {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket(testBucket))
	s := &s3Server{backend: backend, handler: gofakes3.New(backend).Server()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *s3Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (s *s3Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

func (s *s3Server) restart(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err = net.Listen("tcp", s.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, "listening on %s again", s.addr)
	s.serve(ln)
}

func (s *s3Server) url(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=http://%s&region=us-east-1", testBucket, prefix, s.addr)
}

// readObjects decodes every batch object of a bucket: key -> lines.
func readObjects(t *testing.T, bucket *blob.Bucket) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	it := bucket.List(nil)
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if !strings.HasSuffix(obj.Key, ".jsonl.gz") {
			continue
		}
		data, err := bucket.ReadAll(ctx, obj.Key)
		require.NoError(t, err)
		out[obj.Key] = gunzipLines(t, data)
	}
	return out
}

func gunzipLines(t *testing.T, data []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(string(data)))
	require.NoError(t, err)
	var lines []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	return lines
}
