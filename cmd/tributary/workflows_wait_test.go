package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

// TestCLIWorkflowsWait checks each exit code of `workflows wait`.
func TestCLIWorkflowsWait(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	start := func(args ...string) workflow.InsertResult {
		t.Helper()
		res := cli(t, db, nil, append([]string{"workflows", "start"}, append(args, "--json")...)...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var out workflow.InsertResult
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
		return out
	}

	// No worker yet: the wait times out.
	res := cli(t, db, nil, "workflows", "wait", "-", "--timeout", "1s")
	require.Equal(t, exitFailure, res.code, "an unknown workflow: %s", res.stderr)
	slow := start("demo.chain", `{"length":2}`, "--id", "slow")
	res = cli(t, db, nil, "workflows", "wait", "slow", "--timeout", "300ms")
	require.Equal(t, exitWaitTimeout, res.code, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "did not end within 300ms")
	res = cli(t, db, nil, "workflows", "wait", "slow", "--timeout", "-1s")
	require.Equal(t, exitUsage, res.code, res.stderr)

	res = cli(t, db, nil, "workflows", "cancel", slow.ID)
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "workflows", "wait", "slow", "--json")
	require.Equal(t, exitWorkflowCancelled, res.code, res.stderr)
	var o workflow.Outcome
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &o), res.stdout)
	require.Equal(t, workflow.StatusCancelled, o.Status)

	startWorker(t, db)
	ok := start("demo.chain", `{"length":3}`)
	res = cli(t, db, nil, "workflows", "wait", ok.ID, "--timeout", "50s")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "status:   completed")
	require.Contains(t, res.stdout, "link-3 (completed): 3")

	failing := start("demo.fanout", `{"width":3,"fail":1}`)
	res = cli(t, db, nil, "workflows", "wait", failing.ID, "--timeout", "50s")
	require.Equal(t, exitWorkflowFailed, res.code, res.stderr)
	require.Contains(t, res.stdout, "status:   failed")
	require.Contains(t, res.stderr, "ended failed")
}
