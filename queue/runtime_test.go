package queue_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

func TestNewRuntimeRejectsRescueBelowJobTimeout(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	_, err := queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 15 * time.Second})
	require.ErrorContains(t, err, `RescueStuckJobsAfter "15s"`)
	require.ErrorContains(t, err, "JobTimeout 1m0s")

	_, err = queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 2 * time.Minute, JobTimeout: 5 * time.Minute})
	require.ErrorContains(t, err, "JobTimeout 5m0s")

	_, err = queue.NewRuntime(pool, queue.RuntimeConfig{RescueStuckJobsAfter: 15 * time.Second, JobTimeout: -1})
	require.NoError(t, err, "no job timeout: any rescue delay fits")
}

func TestRuntimeProcessIDIsRiversClientID(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{ID: "mine"})
	require.NoError(t, err)
	require.Equal(t, "mine", rt.ProcessID())
	require.Equal(t, "mine", rt.River().ID())

	// An id set through the escape hatch is the one River writes into
	// attempted_by, so it is the process's id too.
	rt, err = queue.NewRuntime(pool, queue.RuntimeConfig{RiverConfigFunc: func(cfg *river.Config) { cfg.ID = "from-river" }})
	require.NoError(t, err)
	require.Equal(t, "from-river", rt.ProcessID())

	_, err = queue.NewRuntime(pool, queue.RuntimeConfig{LivenessTimeout: 500 * time.Millisecond})
	require.ErrorContains(t, err, `LivenessTimeout "500ms"`)
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "queue.liveness", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return queue.NewLivenessService(db.Pool, db.Schema, "contract-"+db.Schema, pgtest.Logger(t)), nil
	})
	servicetest.Run(t, "queue.riverService", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
		if err == nil {
			queue.AddWorker(rt, &countWorker{runs: &atomic.Int64{}})
		}
		return queue.RiverService(rt), err
	})
}
