package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestCLIWorkflowsBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cases := []struct {
		name    string
		args    []string
		mention string
	}{
		{"UnknownStatus", []string{"workflows", "list", "--status", "sleeping"}, `"sleeping"`},
		{"LimitOutOfRange", []string{"workflows", "list", "--limit", "0"}, "--limit 0"},
		{"BadCursor", []string{"workflows", "list", "--after", "nope"}, `"nope"`},
		{"EmptyRef", []string{"workflows", "show", ""}, "ID|KEY must not be empty"},
		{"UnknownMode", []string{"workflows", "retry", "x", "--mode", "sideways"}, `"sideways"`},
		{"UnknownWorkflow", []string{"workflows", "start", "demo.nope", "{}"}, `"demo.nope"`},
		{"MalformedJSON", []string{"workflows", "start", "demo.fanout", `{"width":`}, "not valid JSON"},
		{"ZeroWidth", []string{"workflows", "start", "demo.fanout", `{"width":0}`}, "invalid width 0"},
		{"FailAboveWidth", []string{"workflows", "start", "demo.fanout", `{"width":3,"fail":5}`}, "invalid fail 5"},
		{"UnknownInputField", []string{"workflows", "start", "demo.fanout", `{"width":3,"wide":1}`}, `"wide"`},
		{"ZeroLength", []string{"workflows", "start", "demo.chain", `{"length":0}`}, "invalid length 0"},
		{"NULInInput", []string{"workflows", "start", "demo.chain", `{"length":1,"s":"\u0000"}`}, `\u0000`},
		{"EmptyKey", []string{"workflows", "start", "demo.chain", `{"length":2}`, "--id", ""}, "--id must not be empty"},
		{"EmptyKeyWithEquals", []string{"workflows", "start", "demo.chain", `{"length":2}`, "--id="}, "--id must not be empty"},
		{"BlankKey", []string{"workflows", "start", "demo.chain", `{"length":2}`, "--id", "  "}, "--id must not be empty"},
		{"UnknownSubcommand", []string{"workflows", "frobnicate"}, `"frobnicate"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := cli(t, db, nil, tc.args...)
			require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, tc.mention)
			require.Empty(t, res.stdout)
		})
	}
	require.Equal(t, 0, db.CountJobs(t), "nothing was written")
}

// TestCLIWorkflows starts the demo workflows with the CLI against a real
// worker process and operates them: show, list, cancel, retry.
func TestCLIWorkflows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	startJSON := func(stdin []byte, args ...string) workflow.InsertResult {
		t.Helper()
		res := cliWithStdin(t, db, nil, stdin, append([]string{"workflows", "start"}, append(args, "--json")...)...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var out workflow.InsertResult
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
		return out
	}
	show := func(ref string) workflow.Details {
		t.Helper()
		res := cli(t, db, nil, "workflows", "show", ref, "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		var d workflow.Details
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &d), res.stdout)
		return d
	}
	wait := func(ref string, status workflow.Status) workflow.Details {
		t.Helper()
		var d workflow.Details
		pgtest.WaitFor(t, 60*time.Second, fmt.Sprintf("workflow %s to be %s", ref, status), func() (bool, error) {
			d = show(ref)
			return d.Status == status, nil
		})
		return d
	}
	task := func(d workflow.Details, name string) workflow.TaskInfo {
		t.Helper()
		for _, task := range d.Tasks {
			if task.Name == name {
				return task
			}
		}
		t.Fatalf("workflow %s has no task %q", d.ID, name)
		return workflow.TaskInfo{}
	}

	// Before any worker runs: a chain waits, and show says on what.
	waiting := startJSON(nil, "demo.chain", `{"length":3}`)
	res := cli(t, db, nil, "workflows", "show", waiting.ID)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "status:   running")
	require.Regexp(t, `link-2\s+pending\s+\d+ \(pending\)\s+0\s+waiting on: link-1`, res.stdout)
	// Cancel it; a second cancel is refused as a usage error.
	doomed := startJSON(nil, "demo.chain", `{"length":2}`)
	res = cli(t, db, nil, "workflows", "cancel", doomed.ID)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "2 tasks cancelled")
	res = cli(t, db, nil, "workflows", "cancel", doomed.ID)
	require.Equal(t, exitUsage, res.code, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "already finished")
	res = cli(t, db, nil, "workflows", "show", "no-such-workflow")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `"no-such-workflow"`)

	startWorker(t, db)

	fan := startJSON(nil, "demo.fanout", `{"width":5,"fail":1}`)
	d := wait(fan.ID, workflow.StatusFailed)
	require.Equal(t, workflow.Counts{Completed: 6, Failed: 1}, d.Counts)
	var sum demoworkflows.SumOutput
	require.NoError(t, json.Unmarshal(task(d, "sum").Output, &sum))
	require.EqualValues(t, 10, sum.Sum, "1+2+3+4; part-5 failed")
	require.Equal(t, []string{"part-5"}, sum.Missing)

	// The chain from stdin, with a key: idempotent.
	chain := startJSON([]byte(" {\"length\":20}\n"), "demo.chain", "-", "--id", "chain-1")
	d = wait("chain-1", workflow.StatusCompleted)
	require.Equal(t, chain.ID, d.ID)
	require.Equal(t, workflow.Counts{Completed: 20}, d.Counts)
	require.JSONEq(t, `20`, string(task(d, "link-20").Output))
	again := startJSON(nil, "demo.chain", `{"length":20}`, "--id", "chain-1")
	require.True(t, again.Existing)
	require.Equal(t, chain.ID, again.ID)
	wait(waiting.ID, workflow.StatusCompleted)

	res = cli(t, db, nil, "workflows", "list", "--status", "failed", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var list workflow.ListResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list))
	require.Len(t, list.Workflows, 1)
	require.Equal(t, fan.ID, list.Workflows[0].ID)
	res = cli(t, db, nil, "workflows", "list", "--name", "demo.chain", "--limit", "2")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "chain-1")
	require.Contains(t, res.stdout, "more: --after ")
	require.Equal(t, 4, strings.Count(res.stdout, "\n"), "a header, two workflows, the cursor: %s", res.stdout)

	// Retry the failed part and what follows it: it fails again, the sum
	// runs a second time.
	res = cli(t, db, nil, "workflows", "retry", fan.ID, "--mode", "failed-and-downstream")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "2 tasks run again: part-5, sum")
	pgtest.WaitFor(t, 60*time.Second, "the retried fan-in to finish", func() (bool, error) {
		d = show(fan.ID)
		return d.Status == workflow.StatusFailed && task(d, "sum").Run == 2, nil
	})
	require.Equal(t, 2, task(d, "part-5").Run)
	require.Len(t, task(d, "part-5").Errors, 2, "both runs' errors are kept")
	res = cli(t, db, nil, "workflows", "show", fan.ID)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "error (run 2, attempt 1)")
	require.Contains(t, res.stdout, `output: {"sum": 10`)

	res = cli(t, db, nil, "workflows", "retry", "chain-1")
	require.Equal(t, exitUsage, res.code, res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "nothing to retry")
}
