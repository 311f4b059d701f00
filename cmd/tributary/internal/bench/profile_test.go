package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

//go:noinline
func burnForProfile(d time.Duration) uint64 {
	var x uint64 = 1
	for start := time.Now(); time.Since(start) < d; {
		for i := 0; i < 10000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

// TestCPUProfileTopFunctions: a profile of a process that spends its time
// in one function names that function first, with a flat share and a
// cumulative share no smaller, and a total no smaller than either.
func TestCPUProfileTopFunctions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	p, err := StartCPUProfile(path)
	require.NoError(t, err)
	burnForProfile(400 * time.Millisecond)
	top, total, err := p.Stop(5)
	require.NoError(t, err)
	require.NotEmpty(t, top)
	require.LessOrEqual(t, len(top), 5)
	require.True(t, strings.HasSuffix(top[0].Name, "bench.burnForProfile"), "top function %q", top[0].Name)
	require.Positive(t, top[0].Flat)
	require.GreaterOrEqual(t, top[0].Cum, top[0].Flat)
	require.GreaterOrEqual(t, total, top[0].Cum)

	var sb strings.Builder
	WriteTop(&sb, path, p.Wall, top, total)
	require.Contains(t, sb.String(), "bench.burnForProfile")

	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Positive(t, fi.Size(), "the profile file is kept")
}

func TestTopFunctionsRejectsGarbage(t *testing.T) {
	_, _, err := TopFunctions([]byte("not a profile"), 5)
	require.ErrorContains(t, err, "CPU profile")
}
