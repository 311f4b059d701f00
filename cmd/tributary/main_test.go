package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// binPath is the tributary binary built once for every test in this
// package: the CLI contract (exit codes, stderr, signals) is about a real
// process.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tributary-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "tributary")
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tributary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cliResult is one finished CLI run.
type cliResult struct {
	code   int
	stdout string
	stderr string
}

// cli runs the binary with args against the test's schema. env entries
// ("K=V") override the inherited environment.
func cli(t *testing.T, db *pgtest.DB, env []string, args ...string) cliResult {
	t.Helper()
	return cliWithStdin(t, db, env, nil, args...)
}

// cliWithStdin is cli with stdin fed to the process (nil: none).
func cliWithStdin(t *testing.T, db *pgtest.DB, env []string, stdin []byte, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), cliDeadline(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	pgtest.DieWithTest(cmd)
	cmd.Env = baseEnv(db, env)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("running tributary %v: %v", args, err)
	}
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// cliDeadline is when a CLI run is killed: shortly before the test binary's
// own deadline (go test -timeout), so that a run that hangs fails its test
// with its output, while a run that is slow because the machine is loaded
// (a benchmark sets up a fresh schema per part) is not failed by a fixed
// bound. Without a test deadline, ten minutes.
func cliDeadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if !ok {
		return time.Now().Add(10 * time.Minute)
	}
	return d.Add(-30 * time.Second)
}

// baseEnv is the process environment for a CLI run: the inherited one
// without tributary's variables, then the test's database and schema, then
// the overrides.
func baseEnv(db *pgtest.DB, overrides []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DATABASE_URL", "TRIBUTARY_SCHEMA", "LOG_LEVEL", "LOG_FORMAT", "TRIBUTARY_SHUTDOWN_TIMEOUT",
			"TRIBUTARY_LIVENESS_TIMEOUT", "TRIBUTARY_RESCUE_STUCK_AFTER":
			continue
		}
		env = append(env, kv)
	}
	if db != nil {
		env = append(env, "DATABASE_URL="+db.URL, "TRIBUTARY_SCHEMA="+db.Schema)
	}
	return append(env, overrides...)
}

// benchPoolMax bounds each pool of a `tributary bench` process a test
// starts (benchEnv). A benchmark holds several pools at once (its own, the
// runtime's, the emitters'), by default 20 or 16 connections each, and under
// load its emitters wait longer on each other's aggregate locks, each
// holding a connection, so the pools grow to their bounds: two benchmarks
// side by side held 50 of the server's 100 connections, which every
// package's tests share, and an emit failed with "too many clients"
// (SQLSTATE 53300).
const benchPoolMax = 6

// benchEnv is the environment of a `tributary bench` run: the test
// database with benchPoolMax connections a pool.
func benchEnv() []string {
	return []string{"DATABASE_URL=" + pgtest.URLWithPoolMax(benchPoolMax)}
}

func randomSuffix() string {
	return strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 36)
}
