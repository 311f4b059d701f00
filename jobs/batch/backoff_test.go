package batch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, 5*time.Minute
	within := func(attempt int, want time.Duration) {
		t.Helper()
		got := backoff(attempt, base, limit)
		require.GreaterOrEqual(t, got, want, "attempt %d", attempt)
		require.LessOrEqual(t, got, want+want/10, "attempt %d: at most 10%% jitter", attempt)
	}
	within(1, time.Second)
	within(2, 2*time.Second)
	within(5, 16*time.Second)
	within(9, 256*time.Second)
	within(10, limit)
	within(100, limit)
	within(0, time.Second)
}
