package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/blob/s3blob"

	"github.com/tributary-run/tributary/queue"
)

// Sink stores batch objects. Implementations must make Write all or
// nothing: an object is visible under key only once Write returned nil, and
// a Write of an existing key replaces it (that is what makes a retried flush
// write the same object, not a second one).
type Sink interface {
	// Write stores everything read from r under key. If reading r fails or
	// ctx ends, nothing is stored (an older object under key stays) and the
	// error is returned.
	Write(ctx context.Context, key string, r io.Reader) error
	// Close releases the sink's resources.
	Close() error
}

// SinkPartSizeDefault is the buffer of an S3 upload part. One part at a
// time is uploaded, which bounds an upload's memory to about this size.
const SinkPartSizeDefault = 5 << 20

// BlobSink is a Sink on a gocloud.dev/blob bucket: a directory (file://),
// an S3 bucket (s3://) or memory (mem://).
type BlobSink struct {
	bucket *blob.Bucket
	prefix string
	url    string
	// files writes the objects of a file:// sink (the bucket still reads
	// them back).
	files *fileWriter
}

// NewBlobSink wraps an open bucket; prefix is placed before every key by
// the flusher (see Prefix).
func NewBlobSink(bucket *blob.Bucket, prefix string) *BlobSink {
	return &BlobSink{bucket: bucket, prefix: strings.Trim(prefix, "/")}
}

// OpenSink opens the sink a BATCH_SINK_URL names:
//
//   - file://PATH: a directory, created if missing. A relative PATH
//     (file://./.tributary/batches, file://out) is resolved against the
//     working directory; file:///abs/path is absolute. Objects are written
//     to a temporary file next to their final name, synced, renamed, and
//     their directories synced before Write returns, so a crash never
//     leaves a partial object (it may leave a *.tmp file) and a power loss
//     never loses an object whose Write returned.
//   - s3://BUCKET[/PREFIX]?region=R&endpoint=URL: an S3 bucket; PREFIX is
//     placed before every key. With an endpoint (an S3-compatible server)
//     path-style addressing is the default (use_path_style=false turns it
//     off). Credentials come from the usual AWS environment variables and
//     files. Other query parameters are those of gocloud.dev/blob/s3blob.
//   - mem://: memory, for tests and benchmarks.
func OpenSink(ctx context.Context, rawURL string) (*BlobSink, error) {
	if err := CheckSinkURL(rawURL); err != nil {
		return nil, fmt.Errorf("invalid sink URL %q: %w", queue.RedactURL(rawURL), err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("invalid sink URL %q: %w", rawURL, err)
	}
	var bucket *blob.Bucket
	var files *fileWriter
	prefix := ""
	switch u.Scheme {
	case "file":
		dir := filePath(rawURL)
		if !filepath.IsAbs(dir) {
			wd, err := os.Getwd()
			if err != nil {
				return nil, fmt.Errorf("error resolving sink directory %q: %w", dir, err)
			}
			dir = filepath.Join(wd, dir)
		}
		bucket, err = fileblob.OpenBucket(dir, &fileblob.Options{
			CreateDir: true,
			// Temporary files next to the objects: os.TempDir may be on
			// another file system, where the final rename fails.
			NoTempDir: true,
			Metadata:  fileblob.MetadataDontWrite,
		})
		if err != nil {
			return nil, fmt.Errorf("error opening sink directory %q: %w", dir, err)
		}
		files = &fileWriter{dir: dir, ops: osFileOps{}}
		// The directory may have just been created: make its entry durable
		// before anything is written under it.
		if err := files.ops.SyncDir(filepath.Dir(dir)); err != nil {
			_ = bucket.Close()
			return nil, fmt.Errorf("error syncing the parent of sink directory %q: %w", dir, err)
		}
		prefix = u.Query().Get("prefix")
	case "s3":
		q := u.Query()
		if q.Get("endpoint") != "" && q.Get("use_path_style") == "" && q.Get("s3ForcePathStyle") == "" {
			// Virtual-host addressing puts the bucket in the host name,
			// which S3-compatible servers reached by address cannot serve.
			q.Set("use_path_style", "true")
		}
		prefix = strings.Trim(u.Path, "/")
		if p := q.Get("prefix"); p != "" {
			prefix = p
			q.Del("prefix")
		}
		bu := url.URL{Scheme: "s3", Host: u.Host, RawQuery: q.Encode()}
		bucket, err = (&s3blob.URLOpener{}).OpenBucketURL(ctx, &bu)
		if err != nil {
			return nil, fmt.Errorf("error opening S3 bucket %q: %w", u.Host, err)
		}
	case "mem":
		bucket = memblob.OpenBucket(nil)
		prefix = strings.Trim(u.Path, "/")
	}
	s := NewBlobSink(bucket, prefix)
	s.url = rawURL
	s.files = files
	return s, nil
}

// CheckSinkURL reports why OpenSink cannot open rawURL, without opening
// anything (for a start-up check). The error does not repeat the URL.
func CheckSinkURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme == "file" && filePath(rawURL) == "":
		return errors.New("want file://PATH")
	case u.Scheme == "s3" && u.Host == "":
		return errors.New("want s3://BUCKET?region=REGION&endpoint=URL")
	case u.Scheme != "file" && u.Scheme != "s3" && u.Scheme != "mem":
		return errors.New("want file://PATH, s3://BUCKET?region=...&endpoint=... or mem://")
	}
	return nil
}

// filePath returns the path of a file:// URL without its query; the host
// part of file://./x or file://x/y is part of a relative path.
func filePath(rawURL string) string {
	p := strings.TrimPrefix(rawURL, "file://")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if unescaped, err := url.PathUnescape(p); err == nil {
		p = unescaped
	}
	return p
}

// Prefix is placed before the stream in every object key; it comes from
// the path of an s3:// URL or a prefix= query parameter.
func (s *BlobSink) Prefix() string { return s.prefix }

// Bucket returns the underlying bucket, to read objects back.
func (s *BlobSink) Bucket() *blob.Bucket { return s.bucket }

// Write streams r into the object key; see Sink.
func (s *BlobSink) Write(ctx context.Context, key string, r io.Reader) error {
	if s.files != nil {
		return s.files.Write(ctx, key, r)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.bucket.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType:    "application/x-ndjson",
		BufferSize:     SinkPartSizeDefault,
		MaxConcurrency: 1,
	})
	if err != nil {
		return fmt.Errorf("error opening object %q: %w", key, err)
	}
	if _, err := io.Copy(w, r); err != nil {
		// Cancelling the writer's context before Close aborts the write:
		// no object, or the old one stays.
		cancel()
		_ = w.Close()
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	return nil
}

// Close closes the bucket.
func (s *BlobSink) Close() error {
	if err := s.bucket.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("error closing sink: %w", err)
	}
	return nil
}

// String returns the sink's URL.
func (s *BlobSink) String() string { return s.url }
