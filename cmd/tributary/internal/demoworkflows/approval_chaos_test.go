//go:build chaos

package demoworkflows_test

import (
	"testing"
	"time"
)

// TestChaosApprovalSIGKILL is `make chaos`'s run of the approval workflow:
// 300 demo.approval workflows signalled at random times while a worker
// process is SIGKILLed five times.
func TestChaosApprovalSIGKILL(t *testing.T) {
	t.Parallel()
	runApprovalChaos(t, 300, 5, 30*time.Second, 10*time.Minute)
}
