// Package outsidemod builds and tests code the way a user's module does: in
// a temporary module outside this repository that requires tributary
// through a replace directive to the checkout, so only what tributary
// exports is within reach (an import of an internal/ package fails to
// build, as it would for a user).
package outsidemod

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ModulePath is the module the temporary modules require.
const ModulePath = "github.com/tributary-run/tributary"

// Root returns the checkout's root: the nearest directory above the
// working directory (a test's package directory) with a go.mod.
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("outsidemod: no go.mod above the working directory")
		}
		dir = parent
	}
}

// New makes a temporary module named module (removed when the test ends)
// holding a copy of the files of srcDir (not its subdirectories), with a
// go.mod that requires tributary, replaced by the checkout, at the
// checkout's go version, and the checkout's go.sum (its dependencies'
// checksums). It runs `go mod tidy` there and returns the directory.
func New(tb testing.TB, module, srcDir string) string {
	tb.Helper()
	root := Root(tb)
	dir := tb.TempDir()
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		copyFile(tb, filepath.Join(srcDir, e.Name()), filepath.Join(dir, e.Name()))
	}
	copyFile(tb, filepath.Join(root, "go.sum"), filepath.Join(dir, "go.sum"))
	goMod := "module " + module + "\n\ngo " + goVersion(tb, root) + "\n\n" +
		"require " + ModulePath + " v0.0.0\n\n" +
		"replace " + ModulePath + " => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		tb.Fatal(err)
	}
	Go(tb, dir, "mod", "tidy")
	return dir
}

// Go runs the go command with args in dir, with this process's
// environment (so TEST_DATABASE_URL reaches the module's tests), and fails
// the test with the command's output when it fails. It returns the
// output.
func Go(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = dir
	// -mod=mod lets the go command fill in go.sum from the copied one;
	// GOWORK=off keeps a go.work above the temporary directory out.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("outsidemod: go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out.String())
	}
	return out.String()
}

// goCommand is the go command of the toolchain running the tests.
func goCommand() string {
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		return filepath.Join(goroot, "bin", "go")
	}
	if path, err := exec.LookPath("go"); err == nil {
		return path
	}
	return "go"
}

// goVersion reads the go directive of the checkout's go.mod.
func goVersion(tb testing.TB, root string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return v
		}
	}
	tb.Fatal("outsidemod: no go directive in go.mod")
	return ""
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
