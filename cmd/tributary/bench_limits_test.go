package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCLIBenchLimits(t *testing.T) {
	t.Parallel()
	env := benchEnv()
	res := cli(t, nil, env, "bench", "limits", "-n", "200", "--rounds", "1", "--rate", "50", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	type side struct {
		Jobs       int     `json:"jobs"`
		JobsPerSec float64 `json:"jobs_per_sec"`
	}
	var out struct {
		Plain        side    `json:"plain"`
		Declared     side    `json:"declared"`
		Ratio        float64 `json:"ratio"`
		Rate         int     `json:"rate"`
		Bound        side    `json:"bound"`
		BoundRatio   float64 `json:"bound_ratio"`
		BoundBusiest int     `json:"bound_busiest_window"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, 200, out.Plain.Jobs)
	require.Equal(t, 200, out.Declared.Jobs)
	require.Positive(t, out.Ratio)
	require.Equal(t, 250, out.Bound.Jobs, "five seconds' worth at the rate")
	require.Positive(t, out.BoundRatio)
	require.Positive(t, out.BoundBusiest)
	require.LessOrEqual(t, out.BoundBusiest, 50, "no one-second window holds more starts than the rate")

	for _, bad := range [][]string{{"-n", "0"}, {"--rounds", "0"}, {"--rate", "-1"}, {"--workers", "0"}} {
		res := cli(t, nil, env, append([]string{"bench", "limits"}, bad...)...)
		require.Equal(t, exitUsage, res.code, res.stderr)
		require.Contains(t, res.stderr, bad[0]+" "+bad[1], "the error names the bad value")
	}
}
