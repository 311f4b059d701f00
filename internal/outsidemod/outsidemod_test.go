package outsidemod_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/outsidemod"
)

// A program outside the module may use the public packages and may not
// import an internal one.
func TestOutsideModule(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte(`package main

import (
	"fmt"

	"github.com/tributary-run/tributary/queue"
)

func main() { fmt.Println(queue.Qualify("app", "/*schema*/t")) }
`), 0o644))
	dir := outsidemod.New(t, "example.com/outside", src)
	require.Equal(t, "\"app\".t\n", outsidemod.Go(t, dir, "run", "."))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "internal.go"), []byte(`package main

import _ "github.com/tributary-run/tributary/internal/strictjson"
`), 0o644))
	rec := &recordingTB{TB: t}
	outsidemod.Go(rec, dir, "build", ".")
	require.Len(t, rec.failures, 1)
	require.Contains(t, rec.failures[0], "use of internal package github.com/tributary-run/tributary/internal/strictjson not allowed")
}

type recordingTB struct {
	testing.TB
	failures []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}
