package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestTaskDetailSaysWhatATaskWaitsFor(t *testing.T) {
	until := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	got := taskDetail(workflow.TaskInfo{State: workflow.TaskActive, WaitingFor: &workflow.Wait{Kind: "signal", Name: "approve", Until: &until}})
	require.Equal(t, `waits for signal "approve" until 2026-12-01T13:00:00Z`, got)
	got = taskDetail(workflow.TaskInfo{State: workflow.TaskActive, WaitingFor: &workflow.Wait{Kind: "sleep", Name: "cool-off"}})
	require.Equal(t, `waits for sleep "cool-off"`, got)
	got = taskDetail(workflow.TaskInfo{State: workflow.TaskPending, WaitingOn: []string{"a", "b"}})
	require.Equal(t, "waiting on: a, b", got)
}
