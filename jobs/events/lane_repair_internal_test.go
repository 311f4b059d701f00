package events

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlanRepair(t *testing.T) {
	t.Parallel()
	seven := int64(7)
	eight := int64(8)
	for _, tt := range []struct {
		name string
		s    laneSnapshot
		want repairAction
	}{
		{"pending head: a lost promotion", laneSnapshot{jobID: 7, jobState: "pending"}, repairPromote},
		{"pending head with its consumer's limit: waits for admission", laneSnapshot{jobID: 7, jobState: "pending", limited: true}, repairNone},
		{"available head: working", laneSnapshot{jobID: 7, jobState: "available"}, repairNone},
		{"running head", laneSnapshot{jobID: 7, jobState: "running"}, repairNone},
		{"retryable head", laneSnapshot{jobID: 7, jobState: "retryable"}, repairNone},
		{"completed by hand", laneSnapshot{jobID: 7, jobState: "completed"}, repairRelease},
		{"deleted by hand", laneSnapshot{}, repairRelease},
		{"blocked head deleted by retention", laneSnapshot{blockedJobID: &seven}, repairNone},
		{"cancelled through River", laneSnapshot{jobID: 7, jobState: "cancelled", cancelRequested: true}, repairRelease},
		{"cancelled by SQL", laneSnapshot{jobID: 7, jobState: "cancelled"}, repairRelease},
		{"validation cancel under block", laneSnapshot{jobID: 7, jobState: "cancelled", blockedJobID: &seven}, repairNone},
		{"blocked head cancelled through River", laneSnapshot{jobID: 7, jobState: "cancelled", blockedJobID: &seven, cancelRequested: true}, repairRelease},
		{"cancelled, another job recorded", laneSnapshot{jobID: 7, jobState: "cancelled", blockedJobID: &eight}, repairRelease},
		{"discarded under block, recorded", laneSnapshot{jobID: 7, jobState: "discarded", blockedJobID: &seven, ordering: OrderingBlock}, repairNone},
		{"discarded under block, not recorded", laneSnapshot{jobID: 7, jobState: "discarded", ordering: OrderingBlock}, repairBlock},
		{"discarded under skip", laneSnapshot{jobID: 7, jobState: "discarded", ordering: OrderingSkip}, repairRelease},
		{"blocked head retried outside tributary", laneSnapshot{jobID: 7, jobState: "available", blockedJobID: &seven}, repairUnblock},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want.String(), planRepair(tt.s).String())
		})
	}
}
