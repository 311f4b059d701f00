package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCLIBenchWorkflows(t *testing.T) {
	t.Parallel()
	env := benchEnv()
	res := cli(t, nil, env, "bench", "workflows", "-n", "20", "--width", "50", "--length", "10", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	type side struct {
		Jobs       int     `json:"jobs"`
		JobsPerSec float64 `json:"jobs_per_sec"`
	}
	var out struct {
		Plain    side    `json:"plain"`
		Diamonds side    `json:"diamonds"`
		Ratio    float64 `json:"ratio"`
		FanIn    struct {
			Width int   `json:"width"`
			Start int64 `json:"start_ns"`
		} `json:"fan_in"`
		Chain struct {
			Length int   `json:"length"`
			P50    int64 `json:"hop_p50_ns"`
			P99    int64 `json:"hop_p99_ns"`
		} `json:"chain"`
		RiverChain struct {
			Length int   `json:"length"`
			P50    int64 `json:"hop_p50_ns"`
		} `json:"chain_river"`
		LoadAvgStart string `json:"load_avg_start"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, 100, out.Plain.Jobs, "five plain jobs per diamond")
	require.Equal(t, 100, out.Diamonds.Jobs, "five tasks per diamond")
	require.Positive(t, out.Plain.JobsPerSec)
	require.Positive(t, out.Diamonds.JobsPerSec)
	require.Positive(t, out.Ratio)
	require.Equal(t, 50, out.FanIn.Width)
	require.Positive(t, out.FanIn.Start, "the fan-in task starts after the last fan-out task completed")
	require.Equal(t, 10, out.Chain.Length)
	require.Positive(t, out.Chain.P50, "each task starts after the one before completed")
	require.GreaterOrEqual(t, out.Chain.P99, out.Chain.P50)
	require.Equal(t, 10, out.RiverChain.Length, "the bare River chain is as long")
	require.Positive(t, out.RiverChain.P50, "each bare River job starts after the one before inserted it")
	require.NotEmpty(t, out.LoadAvgStart)

	for _, bad := range [][]string{{"--width", "0"}, {"--length", "1"}, {"-n", "0"}, {"--rounds", "0"}} {
		res := cli(t, nil, env, append([]string{"bench", "workflows"}, bad...)...)
		require.Equal(t, exitUsage, res.code, res.stderr)
		require.Contains(t, res.stderr, bad[0]+" "+bad[1], "the error names the bad value")
	}
}
