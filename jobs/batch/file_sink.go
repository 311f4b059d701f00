package batch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// fileWriter writes the objects of a file:// sink: into a temporary file
// next to the object's final name, synced, renamed over it, and the
// directories synced, all before Write returns. The flusher deletes the
// staged items as soon as Write returned, so after a power loss the object
// must be on disk whenever that delete is: without the syncs the delete
// could be durable while the object (or its directory entry) is not, and
// fileblob's own writer renames without syncing anything. A crash
// never leaves a partial object under the key (it may leave a *.tmp file).
// Objects are read back through the fileblob bucket of the same directory,
// so keys map to paths the way fileblob maps them; keys that fileblob would
// escape are refused (see checkFileKey).
type fileWriter struct {
	dir string
	ops fileOps
}

// fileOps is the file system as fileWriter uses it; tests record the order
// of its calls.
type fileOps interface {
	MkdirAll(dir string) error
	CreateExcl(name string) (file, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir makes dir's entries (a rename into it, a directory created
	// in it) durable.
	SyncDir(dir string) error
}

// file is an open file as fileWriter uses it.
type file interface {
	io.Writer
	Sync() error
	Close() error
}

// osFileOps is fileOps on the real file system.
type osFileOps struct{}

func (osFileOps) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o777) }

// CreateExcl creates name, failing if it exists. The mode is 0666 before
// the umask, like fileblob's, not os.CreateTemp's 0600.
func (osFileOps) CreateExcl(name string) (file, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
}

func (osFileOps) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (osFileOps) Remove(name string) error             { return os.Remove(name) }

func (osFileOps) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkFileKey refuses keys whose file would not be where fileblob reads
// it, or outside the directory: empty segments ("a//b", a leading or
// trailing slash), "." and "..", control characters, and fileblob's
// reserved ".attrs" suffix.
func checkFileKey(key string) error {
	if strings.HasSuffix(key, ".attrs") {
		return fmt.Errorf("invalid object key %q: the suffix .attrs is reserved by the file sink", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("invalid object key %q: empty, \".\" or \"..\" path segment", key)
		}
		if strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
			return fmt.Errorf("invalid object key %q: control character or backslash", key)
		}
	}
	return nil
}

// Write stores everything read from r under key; see Sink.
func (w *fileWriter) Write(ctx context.Context, key string, r io.Reader) error {
	if err := checkFileKey(key); err != nil {
		return err
	}
	path := filepath.Join(w.dir, filepath.FromSlash(key))
	if err := w.ops.MkdirAll(filepath.Dir(path)); err != nil {
		return fmt.Errorf("error creating the directory of object %q: %w", key, err)
	}
	tmp, f, err := w.createTemp(path)
	if err != nil {
		return fmt.Errorf("error creating a temporary file for object %q: %w", key, err)
	}
	if err := w.fill(ctx, f, r); err != nil {
		_ = f.Close()
		_ = w.ops.Remove(tmp)
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = w.ops.Remove(tmp)
		return fmt.Errorf("error syncing object %q to disk: %w", key, err)
	}
	if err := f.Close(); err != nil {
		_ = w.ops.Remove(tmp)
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		_ = w.ops.Remove(tmp)
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	if err := w.ops.Rename(tmp, path); err != nil {
		_ = w.ops.Remove(tmp)
		return fmt.Errorf("error writing object %q: %w", key, err)
	}
	// The object's directory holds the rename; each one above it up to the
	// sink's holds a directory this or a concurrent write may have just
	// created. Syncing them all, rather than the ones this write created,
	// also covers a directory another write created and has not synced
	// yet.
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if err := w.ops.SyncDir(d); err != nil {
			// The object is in place but may not survive a power loss:
			// failing keeps the staged items, and the retry rewrites it.
			return fmt.Errorf("error syncing directory %q of object %q to disk: %w", d, key, err)
		}
		if d == w.dir || d == filepath.Dir(d) {
			break
		}
	}
	return nil
}

// fill copies r into f, stopping when ctx ends.
func (w *fileWriter) fill(ctx context.Context, f file, r io.Reader) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := io.Copy(f, &ctxReader{ctx: ctx, r: r})
	return err
}

func (w *fileWriter) createTemp(path string) (string, file, error) {
	for range 100 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := path + "." + hex.EncodeToString(b[:]) + ".tmp"
		f, err := w.ops.CreateExcl(name)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return name, f, err
	}
	return "", nil, fmt.Errorf("no free temporary name next to %q", path)
}

// ctxReader ends a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
