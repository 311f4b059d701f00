package batch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recordingOps is the real file system, recording each step in order;
// failOn makes the step with that name fail.
type recordingOps struct {
	osFileOps
	mu     sync.Mutex
	steps  []string
	failOn string
}

func (r *recordingOps) record(step, path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, step+" "+path)
	if r.failOn == step {
		return fmt.Errorf("injected %s failure", step)
	}
	return nil
}

func (r *recordingOps) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps)
}

func (r *recordingOps) CreateExcl(name string) (file, error) {
	if err := r.record("create", name); err != nil {
		return nil, err
	}
	f, err := r.osFileOps.CreateExcl(name)
	if err != nil {
		return nil, err
	}
	return &recordingFile{file: f, ops: r, name: name}, nil
}

func (r *recordingOps) Rename(oldpath, newpath string) error {
	if err := r.record("rename", oldpath+" -> "+newpath); err != nil {
		return err
	}
	return r.osFileOps.Rename(oldpath, newpath)
}

func (r *recordingOps) SyncDir(dir string) error {
	if err := r.record("syncdir", dir); err != nil {
		return err
	}
	return r.osFileOps.SyncDir(dir)
}

type recordingFile struct {
	file
	ops  *recordingOps
	name string
}

func (f *recordingFile) Sync() error {
	if err := f.ops.record("sync", f.name); err != nil {
		return err
	}
	return f.file.Sync()
}

func (f *recordingFile) Close() error {
	if err := f.ops.record("close", f.name); err != nil {
		return err
	}
	return f.file.Close()
}

func indexOf(steps []string, prefix string) int {
	return slices.IndexFunc(steps, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestFileSinkDurableBeforeWriteReturns: the flusher deletes the staged
// items once Write returned. After a power loss the object must therefore
// be on disk whenever the delete is: its data synced before the rename
// makes it visible, and the rename (and every directory it needed) synced
// before Write returns.
func TestFileSinkDurableBeforeWriteReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*BlobSink, *recordingOps, string) {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "sink")
		s, err := OpenSink(ctx, "file://"+dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		ops := &recordingOps{}
		s.files.ops = ops
		return s, ops, dir
	}

	t.Run("SyncFileRenameSyncDirectories", func(t *testing.T) {
		t.Parallel()
		s, ops, dir := setup(t)
		key := ObjectKey("p", "stream", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), "a")
		require.NoError(t, s.Write(ctx, key, strings.NewReader("hello\n")))
		steps := ops.snapshot()
		t.Logf("steps: %q", steps)
		final := filepath.Join(dir, filepath.FromSlash(key))

		syncAt, closeAt, renameAt := indexOf(steps, "sync "), indexOf(steps, "close "), indexOf(steps, "rename ")
		require.NotEqual(t, -1, syncAt, "the object's data was never synced")
		require.NotEqual(t, -1, renameAt)
		require.Less(t, syncAt, closeAt, "sync before close")
		require.Less(t, closeAt, renameAt, "the data is synced and closed before the rename makes it visible")
		require.True(t, strings.HasSuffix(steps[renameAt], " -> "+final), steps[renameAt])

		// Every directory from the object's up to the sink's own is synced
		// after the rename: the rename's entry, and the entries of the
		// directories this write created.
		var want []string
		for d := filepath.Dir(final); ; d = filepath.Dir(d) {
			want = append(want, "syncdir "+d)
			if d == dir {
				break
			}
		}
		require.Equal(t, want, steps[renameAt+1:], "after the rename, only directory syncs, the object's directory first")
		got, err := os.ReadFile(final)
		require.NoError(t, err)
		require.Equal(t, "hello\n", string(got))
	})

	for _, step := range []string{"sync", "syncdir"} {
		t.Run("Failed_"+step, func(t *testing.T) {
			t.Parallel()
			s, ops, dir := setup(t)
			ops.failOn = step
			err := s.Write(ctx, "k/x.jsonl.gz", strings.NewReader("data\n"))
			require.ErrorContains(t, err, "injected "+step+" failure")
			require.ErrorContains(t, err, `"k/x.jsonl.gz"`)
			entries, err := os.ReadDir(filepath.Join(dir, "k"))
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, strings.HasSuffix(e.Name(), ".tmp"), "temporary file %s left behind", e.Name())
			}
			if step == "sync" {
				_, err := os.Stat(filepath.Join(dir, "k", "x.jsonl.gz"))
				require.True(t, errors.Is(err, os.ErrNotExist), "an unsynced object must not be renamed into place")
			}
		})
	}
}

func TestFileSinkRefusesKeysOutsideItsLayout(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sink")
	s, err := OpenSink(context.Background(), "file://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for _, key := range []string{"", "/abs", "a//b", "a/", "../up", "a/../b", "a/./b", "a/x.attrs", "a/b\x00c", "a\\b"} {
		err := s.Write(context.Background(), key, strings.NewReader("x"))
		require.ErrorContains(t, err, "invalid object key", "%q", key)
		require.ErrorContains(t, err, fmt.Sprintf("%q", key))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was written")
}
