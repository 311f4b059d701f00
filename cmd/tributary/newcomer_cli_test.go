package main

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// emit --any-type writes an event of a type the CLI does not know, with any
// JSON payload; without it such a type is refused, and a known type's
// payload is checked strictly either way.
func TestCLIEmitAnyType(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	res := cli(t, db, nil, "emit", "billing.invoice_paid", `{"invoice":"i-1","cents":5}`)
	require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
	require.Contains(t, res.stderr, `"billing.invoice_paid"`)
	require.Zero(t, outboxCount(t, db))

	res = cli(t, db, nil, "emit", "billing.invoice_paid", `{"invoice":"i-1","cents":5}`, "--any-type", "--aggregate", "i-1", "--json")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	var out struct {
		ID        string `json:"id"`
		EventType string `json:"event_type"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Equal(t, "billing.invoice_paid", out.EventType)
	var typ, agg, payload string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		db.Q(`SELECT event_type, aggregate_id, payload::text FROM /*schema*/tributary_outbox WHERE id = $1`), out.ID).Scan(&typ, &agg, &payload))
	require.Equal(t, "billing.invoice_paid", typ)
	require.Equal(t, "i-1", agg)
	require.JSONEq(t, `{"invoice":"i-1","cents":5}`, payload)

	// From stdin too.
	res = cliStdin(t, db, []byte(`["any", "json"]`), "emit", "billing.batch", "-", "--any-type")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)

	for _, tc := range []struct {
		name    string
		args    []string
		mention string
	}{
		{"InvalidTypeName", []string{"emit", "bad type!", `{}`, "--any-type"}, `"bad type!"`},
		{"EmptyType", []string{"emit", "", `{}`, "--any-type"}, "EVENT_TYPE must not be empty"},
		{"NotJSON", []string{"emit", "billing.x", `{"a":`, "--any-type"}, "not valid JSON"},
		{"NULInPayload", []string{"emit", "billing.x", `{"a":"\u0000"}`, "--any-type"}, `\u0000`},
		{"DuplicateKey", []string{"emit", "billing.x", `{"a":1,"a":2}`, "--any-type"}, `duplicate key "a"`},
		{"KnownTypeStaysStrict", []string{"emit", "demo.note", `{"txt":"x"}`, "--any-type"}, "txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := cli(t, db, nil, tc.args...)
			require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, tc.mention)
			require.Empty(t, res.stdout)
		})
	}
	require.Equal(t, 2, outboxCount(t, db))
}

// enqueue KIND - reads the arguments from stdin, as emit does.
func TestCLIEnqueueArgsFromStdin(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	big := strings.Repeat("x", 200<<10) // more than one command-line argument may be
	res := cliStdin(t, db, []byte(`{"note":"`+big+`"}`), "enqueue", "my.kind", "-", "--any-kind", "--json")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	var out struct {
		ID   int64  `json:"id"`
		Kind string `json:"kind"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Equal(t, "my.kind", out.Kind)
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		db.Q(`SELECT length(args->>'note') FROM /*schema*/river_job WHERE id = $1`), out.ID).Scan(&n))
	require.Equal(t, len(big), n)

	res = cliStdin(t, db, []byte(`{"ms":5}`), "enqueue", "demo.sleep", "-")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	require.Contains(t, res.stdout, "demo.sleep")

	for name, stdin := range map[string]string{
		"NotJSON":      `{"ms":`,
		"WrongArgType": `{"ms":"ten"}`,
		"Empty":        ``,
	} {
		t.Run(name, func(t *testing.T) {
			res := cliStdin(t, db, []byte(stdin), "enqueue", "demo.sleep", "-")
			require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
			oneSentence(t, res.stderr)
			require.Empty(t, res.stdout)
		})
	}
	require.Equal(t, 2, db.CountJobs(t))
}

// version prints the module version, the revision when the build has one
// and the Go version, as text or JSON, and needs no configuration.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	res := cli(t, nil, []string{"LOG_LEVEL=loud", "DATABASE_URL=postgres://u:pw@h:notaport/d"}, "version")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.True(t, strings.HasPrefix(lines[0], "tributary "), res.stdout)
	require.Equal(t, "built with "+runtime.Version(), lines[len(lines)-1])

	res = cli(t, nil, nil, "version", "--json")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &v))
	require.Equal(t, "github.com/tributary-run/tributary", v.Module)
	require.NotEmpty(t, v.Version)
	require.Equal(t, runtime.Version(), v.GoVersion)
	require.Equal(t, strings.TrimPrefix(lines[0], "tributary "), v.Version)

	res = cli(t, nil, nil, "version", "extra")
	require.Equal(t, exitUsage, res.code)
}

// Shell completion is cobra's completion command, as docs/cli.md shows.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash": "__start_tributary",
		"zsh":  "#compdef tributary",
		"fish": "complete -c tributary",
	} {
		res := cli(t, nil, nil, "completion", shell)
		require.Equal(t, exitOK, res.code, "%s: %s", shell, res.stderr)
		require.Contains(t, res.stdout, want, shell)
	}
	// It completes the commands themselves.
	res := cli(t, nil, nil, "__complete", "ver")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "version")
}
