package batch

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

// sinkUnderTest is one Sink implementation and a way to read what it
// stored.
type sinkUnderTest struct {
	sink Sink
	read func(key string) ([]byte, bool)
}

// runSinkContract is the behaviour every Sink must have; each
// implementation runs it (Watermill-style contract suite).
func runSinkContract(t *testing.T, newSink func(t *testing.T) sinkUnderTest) {
	t.Helper()
	ctx := context.Background()

	t.Run("WriteThenRead", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		key := ObjectKey("", "stream", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), "a")
		require.NoError(t, s.sink.Write(ctx, key, strings.NewReader("hello\n")))
		got, ok := s.read(key)
		require.True(t, ok)
		require.Equal(t, "hello\n", string(got))
	})

	t.Run("RewriteReplaces", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		require.NoError(t, s.sink.Write(ctx, "k/x.jsonl.gz", strings.NewReader("first version, longer\n")))
		require.NoError(t, s.sink.Write(ctx, "k/x.jsonl.gz", strings.NewReader("second\n")))
		got, ok := s.read("k/x.jsonl.gz")
		require.True(t, ok)
		require.Equal(t, "second\n", string(got))
	})

	t.Run("FailedReaderStoresNothing", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		boom := errors.New("encoder failed")
		r := io.MultiReader(strings.NewReader(strings.Repeat("x", 1000)), &failingReader{err: boom})
		err := s.sink.Write(ctx, "k/broken.jsonl.gz", r)
		require.ErrorIs(t, err, boom)
		_, ok := s.read("k/broken.jsonl.gz")
		require.False(t, ok, "a failed write must not leave an object")
	})

	t.Run("FailedRewriteKeepsOld", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		require.NoError(t, s.sink.Write(ctx, "k/keep.jsonl.gz", strings.NewReader("old\n")))
		err := s.sink.Write(ctx, "k/keep.jsonl.gz", io.MultiReader(strings.NewReader("new"), &failingReader{err: io.ErrUnexpectedEOF}))
		require.Error(t, err)
		got, ok := s.read("k/keep.jsonl.gz")
		require.True(t, ok)
		require.Equal(t, "old\n", string(got))
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.Error(t, s.sink.Write(cctx, "k/cancelled.jsonl.gz", strings.NewReader("x\n")))
		_, ok := s.read("k/cancelled.jsonl.gz")
		require.False(t, ok)
	})

	t.Run("LargeObject", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		// Larger than one upload part, so S3 uses a multipart upload.
		big := strings.Repeat("0123456789abcdef", (SinkPartSizeDefault+SinkPartSizeDefault/2)/16)
		require.NoError(t, s.sink.Write(ctx, "k/big.jsonl.gz", strings.NewReader(big)))
		got, ok := s.read("k/big.jsonl.gz")
		require.True(t, ok)
		require.Equal(t, len(big), len(got))
		require.Equal(t, big, string(got))
	})
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

func blobReader(t *testing.T, b *blob.Bucket) func(key string) ([]byte, bool) {
	return func(key string) ([]byte, bool) {
		data, err := b.ReadAll(context.Background(), key)
		if err != nil {
			return nil, false
		}
		return data, true
	}
}

func TestFileSinkContract(t *testing.T) {
	t.Parallel()
	runSinkContract(t, func(t *testing.T) sinkUnderTest {
		dir := filepath.Join(t.TempDir(), "not", "yet", "there")
		s, err := OpenSink(context.Background(), "file://"+dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return sinkUnderTest{sink: s, read: blobReader(t, s.Bucket())}
	})
}

func TestS3SinkContract(t *testing.T) {
	t.Parallel()
	runSinkContract(t, func(t *testing.T) sinkUnderTest {
		srv := startS3(t)
		s, err := OpenSink(context.Background(), srv.url(""))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return sinkUnderTest{sink: s, read: blobReader(t, s.Bucket())}
	})
}

func TestMemSinkContract(t *testing.T) {
	t.Parallel()
	runSinkContract(t, func(t *testing.T) sinkUnderTest {
		s, err := OpenSink(context.Background(), "mem://")
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return sinkUnderTest{sink: s, read: blobReader(t, s.Bucket())}
	})
}

func TestOpenSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RelativeFilePath", func(t *testing.T) {
		t.Parallel()
		// file://./x is relative to the working directory; the test only
		// checks the resolution, not a write, so it leaves nothing behind.
		require.Equal(t, "./.tributary/batches", filePath("file://./.tributary/batches"))
		require.Equal(t, "/abs/dir", filePath("file:///abs/dir?prefix=p"))
		require.Equal(t, "out/dir", filePath("file://out/dir"))
	})

	t.Run("S3PrefixFromPath", func(t *testing.T) {
		t.Parallel()
		srv := startS3(t)
		s, err := OpenSink(ctx, srv.url("logs/prod/"))
		require.NoError(t, err)
		defer s.Close()
		require.Equal(t, "logs/prod", s.Prefix())
	})

	t.Run("BadURLs", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{"ftp://x", "s3://", "file://", "://nope"} {
			_, err := OpenSink(ctx, u)
			require.Error(t, err, u)
			require.Contains(t, err.Error(), "sink", u)
		}
	})
}
