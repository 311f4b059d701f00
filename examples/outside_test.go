// Package examples_test checks that the examples are what they claim to be:
// programs a user can copy into a module of their own. It builds them in a
// temporary module outside this repository, runs the quick start there
// against the test database, and checks that README.md shows the quick
// start as it is.
package examples_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/outsidemod"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// module is the repository's module path, which an outside module replaces
// with the checkout.
const module = outsidemod.ModulePath

// repoRoot returns the checkout's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	return outsidemod.Root(t)
}

// exampleFiles returns the example's files a user copies: its Go files
// (not its tests, which use this repository's test harness) and the rest.
func exampleFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files = append(files, path)
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files, dir)
	return files
}

// TestExamplesImportNoInternalPackage: an example that imports an internal
// package compiles here and nowhere else.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	fset := token.NewFileSet()
	for _, example := range []string{"quickstart", "orders", "workflow"} {
		for _, path := range exampleFiles(t, filepath.Join(root, "examples", example)) {
			if !strings.HasSuffix(path, ".go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				require.False(t, strings.HasPrefix(p, module+"/") && strings.Contains(p+"/", "/internal/"),
					"%s imports %s: a user's module cannot", path, p)
			}
		}
	}
}

// TestQuickstartIsREADMEsFirstProgram: README.md's first program, between
// its quickstart markers, is examples/quickstart/main.go as it is.
func TestQuickstartIsREADMEsFirstProgram(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	program, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "main.go"))
	require.NoError(t, err)
	const begin, end = "<!-- quickstart:begin -->", "<!-- quickstart:end -->"
	_, rest, ok := strings.Cut(string(readme), begin)
	require.True(t, ok, "README.md has no %s marker: put examples/quickstart/main.go between %s and %s as one ```go block", begin, begin, end)
	block, _, ok := strings.Cut(rest, end)
	require.True(t, ok, "README.md has %s but no %s", begin, end)
	_, code, ok := strings.Cut(block, "```go\n")
	require.True(t, ok, "README.md's quick start has no ```go block")
	code, _, ok = strings.Cut(code, "```")
	require.True(t, ok, "README.md's quick start block is not closed")
	require.Equal(t, string(program), code, "README.md's first program must be examples/quickstart/main.go, verbatim")
	// Short, and ordinary Go to read top-down: no line a reader must
	// scroll (a tab counts as four columns).
	require.LessOrEqual(t, bytes.Count(program, []byte("\n")), quickstartMaxLines, "the quick start is at most %d lines", quickstartMaxLines)
	for i, line := range strings.Split(string(program), "\n") {
		require.LessOrEqual(t, len(strings.ReplaceAll(line, "\t", "    ")), 100, "line %d of the quick start is longer than 100 columns: %s", i+1, line)
	}
}

// quickstartMaxLines bounds the quick start: a worker with a job kind, an
// ordered consumer, a two-task workflow and a cron schedule, with the
// error checks and line lengths of ordinary Go.
const quickstartMaxLines = 40

// TestExamplesBuildOutsideTheRepository copies the quick start and the
// orders service into a new module in a temporary directory, with a replace
// directive to this checkout, and builds and vets them there. It then runs
// the quick start on a schema of its own until its job, its consumer, its
// workflow and its schedule each did their work, stops it with SIGTERM and
// expects exit 0.
func TestExamplesBuildOutsideTheRepository(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	goMod := "module example.com/outside\n\ngo 1.26.0\n\nrequire " + module + " v0.0.0\n\nreplace " + module + " => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	for _, example := range []string{"quickstart", "orders", "workflow"} {
		src := filepath.Join(root, "examples", example)
		for _, path := range exampleFiles(t, src) {
			rel, err := filepath.Rel(src, path)
			require.NoError(t, err)
			dst := filepath.Join(dir, example, rel)
			require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, data, 0o644))
		}
	}

	// outsidemod.Go runs the go command as for the other outside modules
	// (-mod=mod: go.mod and go.sum take what the build needs).
	bin := filepath.Join(dir, "bin")
	outsidemod.Go(t, dir, "build", "-o", bin+string(filepath.Separator), "./...")
	outsidemod.Go(t, dir, "vet", "./...")

	runQuickstart(t, filepath.Join(bin, "quickstart"))
}

// runQuickstart runs the quick start's binary on a new schema, which the
// program migrates itself, until the database shows that each of its parts
// did its work, then stops it with SIGTERM.
func runQuickstart(t *testing.T, bin string) {
	t.Helper()
	pool := pgtest.Pool(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "quickstart_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
		}
	})

	var out pgtest.SyncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DatabaseURL(), "TRIBUTARY_SCHEMA="+schema, "TRIBUTARY_SHUTDOWN_TIMEOUT=5s")
	cmd.Stdout, cmd.Stderr = &out, &out
	pgtest.DieWithTest(cmd)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // after a failure; a no-op once it exited

	q := func(sql string) string { return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize()) }
	count := func(sql string, args ...any) (int, error) {
		var n int
		err := pool.QueryRow(context.Background(), q(sql), args...).Scan(&n)
		return n, err
	}
	done := map[string]string{
		"the job kind (both workflow tasks)": `SELECT count(*) FROM {schema}.river_job WHERE kind = 'hello' AND state = 'completed' AND args->>'Name' IN ('first', 'second')`,
		"the cron schedule":                  `SELECT count(*) FROM {schema}.river_job WHERE kind = 'hello' AND state = 'completed' AND args->>'Name' = 'cron'`,
		"the workflow":                       `SELECT count(*) FROM {schema}.tributary_workflow WHERE name = 'greetings' AND status = 'completed'`,
		"the consumer":                       `SELECT count(*) FROM {schema}.river_job WHERE kind IN ($1, $2) AND state = 'completed'`,
	}
	for what, sql := range done {
		pgtest.WaitFor(t, 60*time.Second, "the quick start's "+what+" did its work", func() (bool, error) {
			select {
			case err := <-exited:
				return false, errors.Join(errors.New("the quick start exited:\n"+out.String()), err)
			default:
			}
			var args []any
			if strings.Contains(sql, "$1") {
				args = []any{events.DispatchKind, events.DispatchBatchKind}
			}
			n, err := count(sql, args...)
			if err != nil && strings.Contains(err.Error(), "does not exist") {
				return false, nil // not migrated yet
			}
			return n > 0, err
		})
	}
	require.Contains(t, out.String(), "billing ", "the consumer's handler ran")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "the quick start exits 0 on SIGTERM:\n%s", out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the quick start did not exit within 30s of SIGTERM:\n%s", out.String())
	}
}
