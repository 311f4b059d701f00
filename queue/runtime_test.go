package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

func TestNewRuntimeRejectsRescueBelowJobTimeout(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	_, err := queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 15 * time.Second})
	require.ErrorContains(t, err, "RescueStuckJobsAfter 15s")
	require.ErrorContains(t, err, "JobTimeout 1m0s")

	_, err = queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 2 * time.Minute, JobTimeout: 5 * time.Minute})
	require.ErrorContains(t, err, "JobTimeout 5m0s")

	_, err = queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 15 * time.Second, JobTimeout: -1})
	require.NoError(t, err, "no job timeout: any rescue delay fits")
}
