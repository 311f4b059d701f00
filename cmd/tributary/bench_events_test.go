package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLIBenchEvents runs the events benchmark small: both consumers'
// throughput parts come with the CPU this process and Postgres spent per
// event, and the latency parts with their percentiles.
func TestCLIBenchEvents(t *testing.T) {
	t.Parallel()
	env := benchEnv()
	res := cli(t, nil, env, "bench", "events", "-n", "2000", "--aggregates", "100", "--rate", "200", "--latency-for", "500ms", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var out struct {
		Baseline struct {
			Jobs int `json:"jobs"`
		} `json:"baseline"`
		River struct {
			Jobs int `json:"jobs"`
		} `json:"river"`
		RiverRatios []float64 `json:"river_ratios"`
		Throughput  []struct {
			DispatchBatch   int   `json:"dispatch_batch"`
			Events          int   `json:"events"`
			SelfCPUPerEvent int64 `json:"self_cpu_per_event_ns"`
			DBCPUPerEvent   int64 `json:"db_cpu_per_event_ns"`
		} `json:"throughput"`
		Latency []struct {
			Events int   `json:"events"`
			P50    int64 `json:"p50_ns"`
			P99    int64 `json:"p99_ns"`
		} `json:"latency"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, 2000, out.Baseline.Jobs)
	require.Equal(t, 2000, out.River.Jobs, "the bare River client's baseline")
	require.Len(t, out.RiverRatios, 2)
	require.Len(t, out.Throughput, 2, "one job per event, then the batched consumer")
	for _, tp := range out.Throughput {
		require.Equal(t, 2000, tp.Events)
		require.Positive(t, tp.SelfCPUPerEvent, "dispatch batch %d: this process's CPU per event", tp.DispatchBatch)
		require.Positive(t, tp.DBCPUPerEvent, "dispatch batch %d: Postgres's CPU per event", tp.DispatchBatch)
	}
	require.Len(t, out.Latency, 2)
	for _, l := range out.Latency {
		require.Positive(t, l.Events)
		require.Positive(t, l.P50)
		require.GreaterOrEqual(t, l.P99, l.P50)
	}

	res = cli(t, nil, env, "bench", "events", "-n", "500", "--aggregates", "10", "--latency-for", "200ms", "--batched-only", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	out.Throughput, out.Latency = nil, nil
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Len(t, out.Throughput, 1, "--batched-only: the batched consumer's run alone")
	require.Equal(t, 100, out.Throughput[0].DispatchBatch)
	require.Len(t, out.Latency, 1)

	res = cli(t, nil, env, "bench", "events", "--batched-only", "--dispatch-batch", "1")
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, "--batched-only with --dispatch-batch 1")

	res = cli(t, nil, env, "bench", "events", "--rounds", "0")
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, "invalid --rounds 0")
}

// TestCLIBenchEventsRounds runs the throughput part three times: the
// report keeps every round, each with its own baselines and ratios, and
// gives the medians of the per-round ratios.
func TestCLIBenchEventsRounds(t *testing.T) {
	t.Parallel()
	env := benchEnv()
	res := cli(t, nil, env, "bench", "events", "-n", "300", "--aggregates", "10", "--latency-for", "200ms", "--batched-only", "--rounds", "3")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "(round 3/3)")
	require.Contains(t, res.stdout, "median of the per-round ratios")

	res = cli(t, nil, env, "bench", "events", "-n", "300", "--aggregates", "10", "--latency-for", "200ms", "--batched-only", "--rounds", "3", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var out struct {
		Ratios []float64 `json:"ratios"`
		Rounds []struct {
			Baseline struct {
				JobsPerSec float64 `json:"jobs_per_sec"`
			} `json:"baseline"`
			Throughput []struct {
				EventsPerSec float64 `json:"events_per_sec"`
			} `json:"throughput"`
			Ratios []float64 `json:"ratios"`
		} `json:"rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Len(t, out.Rounds, 3)
	var ratios []float64
	for _, r := range out.Rounds {
		require.Len(t, r.Throughput, 1)
		require.Len(t, r.Ratios, 1)
		require.InDelta(t, r.Throughput[0].EventsPerSec/r.Baseline.JobsPerSec, r.Ratios[0], 1e-9, "a round's ratio is its own events over its own baseline")
		ratios = append(ratios, r.Ratios[0])
	}
	slices.Sort(ratios)
	require.Equal(t, []float64{ratios[1]}, out.Ratios, "the report's ratio is the median of the rounds'")
}
