//go:build chaos

package workflow_test

import (
	"testing"
	"time"
)

// TestChaosReplicaSIGKILL is the long three-process run (`make chaos`):
// 1,000 diamond workflows, one process SIGKILLed (and restarted) five times.
func TestChaosReplicaSIGKILL(t *testing.T) {
	t.Parallel()
	runReplicas(t, 1000, 5, 20*time.Minute)
}
