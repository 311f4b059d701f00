package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCLIBenchWorkflowSteps(t *testing.T) {
	t.Parallel()
	env := benchEnv()
	res := cli(t, nil, env, "bench", "workflow-steps", "--waiting", "5", "--steps", "20", "--sleepers", "3", "--sleep", "1s", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var out struct {
		Waiting   int   `json:"waiting"`
		SignalP50 int64 `json:"signal_resume_p50_ns"`
		Steps     int   `json:"steps"`
		StepP50   int64 `json:"step_p50_ns"`
		Sleepers  int   `json:"sleepers"`
		LateMax   int64 `json:"sleep_late_max_ns"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, 5, out.Waiting)
	require.Equal(t, 20, out.Steps)
	require.Equal(t, 3, out.Sleepers)
	require.Positive(t, out.SignalP50)
	require.Positive(t, out.StepP50)

	res = cli(t, nil, env, "bench", "workflow-steps", "--steps", "1001")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Contains(t, res.stderr, "--steps 1001")
}
