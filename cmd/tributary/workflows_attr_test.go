package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestCLIWorkflowsAttr starts workflows with attributes and finds them with
// `workflows list --attr`, several ANDed, with counts per status.
func TestCLIWorkflowsAttr(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	start := func(args ...string) string {
		t.Helper()
		res := cli(t, db, nil, append([]string{"workflows", "start", "demo.chain", `{"length":1}`, "--json"}, args...)...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var out workflow.InsertResult
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
		return out.ID
	}
	a := start("--attr", "customer=c-42", "--attr", "region=eu")
	b := start("--attr", "customer=c-42", "--attr", "region=us")
	start("--attr", "customer=c-7")
	res := cli(t, db, nil, "workflows", "cancel", b)
	require.Equal(t, exitOK, res.code, res.stderr)

	type listing struct {
		workflow.ListResult
		Counts map[workflow.Status]queue.Count `json:"counts"`
	}
	list := func(args ...string) listing {
		t.Helper()
		res := cli(t, db, nil, append([]string{"workflows", "list", "--json", "--counts"}, args...)...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var l listing
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &l), res.stdout)
		return l
	}
	l := list("--attr", "customer=c-42")
	require.Len(t, l.Workflows, 2)
	require.Equal(t, b, l.Workflows[0].ID)
	require.Equal(t, int64(1), l.Counts[workflow.StatusRunning].N)
	require.Equal(t, int64(1), l.Counts[workflow.StatusCancelled].N)
	l = list("--attr", "customer=c-42", "--attr", "region=eu")
	require.Len(t, l.Workflows, 1)
	require.Equal(t, a, l.Workflows[0].ID)

	res = cli(t, db, nil, "workflows", "list", "--attr", "customer=c-42", "--counts")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "counts: running 1, completed 0, failed 0, cancelled 1")
	res = cli(t, db, nil, "workflows", "show", a)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "attrs:    customer=c-42 region=eu")

	for _, bad := range [][]string{
		{"workflows", "list", "--attr", "customer"},
		{"workflows", "list", "--attr", "=x"},
		{"workflows", "list", "--attr", "a=1", "--attr", "a=2"},
		{"workflows", "start", "demo.chain", `{"length":1}`, "--attr", "k\x01=v"},
	} {
		res := cli(t, db, nil, bad...)
		require.Equal(t, exitUsage, res.code, "%v: %s", bad, res.stderr)
		oneSentence(t, res.stderr)
	}
}
