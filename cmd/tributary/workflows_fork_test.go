package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestCLIWorkflowsFork(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	res := cli(t, db, nil, "workflows", "start", "demo.chain", `{"length":3}`, "--id", "chain-f", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var started workflow.InsertResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &started))

	res = cli(t, db, nil, "workflows", "fork", "chain-f", "--from", "link-2")
	require.Equal(t, exitUsage, res.code, "link-1 is active: %s", res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "active")

	res = cli(t, db, nil, "workflows", "cancel", "chain-f")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "workflows", "fork", "chain-f", "--from", "link-2")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "running again: link-1, link-2, link-3", "link-1 was cancelled, so it runs again too")
	res = cli(t, db, nil, "workflows", "fork", "chain-f", "--from", "link-2", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var forked workflow.InsertResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &forked))
	res = cli(t, db, nil, "workflows", "show", forked.ID)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "forked:   from "+started.ID+" at task link-2")

	for _, bad := range [][]string{
		{"workflows", "fork", "chain-f", "--from", "link-9"},
		{"workflows", "fork", "chain-f"},
		{"workflows", "fork", "chain-f", "--from", ""},
	} {
		res := cli(t, db, nil, bad...)
		require.Equal(t, exitUsage, res.code, "%v: %s", bad, res.stderr)
		oneSentence(t, res.stderr)
	}
}
