package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type signalArgs struct{}

func (signalArgs) Kind() string { return "clitest.signal" }

// runSignalCmd runs `tributary workflows signal ARGS...` in this process,
// with the command attached under a `workflows` parent as the lead wires
// it, and returns the exit code run() would give.
func runSignalCmd(t *testing.T, db *pgtest.DB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb}
	root := newRootCmd(a)
	parent := &cobra.Command{Use: "workflows"}
	parent.AddCommand(newWorkflowsSignalCmd(a))
	root.AddCommand(parent)
	root.SetArgs(append([]string{"--database-url", db.URL, "--schema", db.Schema, "workflows", "signal"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	var ue *usageError
	switch {
	case err == nil:
		return exitOK, out.String(), errb.String()
	case errors.As(err, &ue) || isCobraUsageError(err):
		return exitUsage, out.String(), err.Error()
	default:
		return exitFailure, out.String(), err.Error()
	}
}

func TestWorkflowsSignalCmd(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	qc, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	wfc := workflow.NewClient(qc)
	wf := workflow.New("cli", &workflow.Opts{ID: "order-77"})
	wf.Add("t", signalArgs{}, nil)
	res, err := wfc.Insert(ctx, wf)
	require.NoError(t, err)

	code, out, stderr := runSignalCmd(t, db, "order-77", "approve", `{"by":"cli"}`, "--key", "k1", "--json")
	require.Equal(t, exitOK, code, stderr)
	var sr workflow.SignalResult
	require.NoError(t, json.Unmarshal([]byte(out), &sr))
	require.Equal(t, res.ID, sr.WorkflowID)
	require.NotZero(t, sr.SignalID)

	code, out, stderr = runSignalCmd(t, db, res.ID, "approve", `{"by":"cli"}`, "--key", "k1")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, `already sent with key "k1"`)

	code, _, stderr = runSignalCmd(t, db, res.ID, "approve", `{not json`)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `invalid JSON payload "{not json"`)

	code, _, stderr = runSignalCmd(t, db, "no-such-order", "approve", `{}`)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `unknown workflow "no-such-order"`)

	code, _, stderr = runSignalCmd(t, db, res.ID, "approve", `"`+strings.Repeat("x", workflow.SignalPayloadMaxBytes)+`"`)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "signal payload of \"approve\"")

	code, _, _ = runSignalCmd(t, db, res.ID, "approve")
	require.Equal(t, exitUsage, code, "two arguments")

	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_signal`)).Scan(&n))
	require.Equal(t, 1, n, "one signal stored")
}
