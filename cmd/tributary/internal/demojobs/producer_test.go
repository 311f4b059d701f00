package demojobs_test

import (
	"testing"
	"time"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoevents"
	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

// TestServiceContract covers both demo producers, the jobs one and the
// events one (package demoevents has no tests of its own).
func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "demojobs.Producer", func(t *testing.T) (queue.Service, error) {
		return demojobs.NewProducer(pgtest.New(t).Client(t), time.Hour), nil
	})
	servicetest.Run(t, "demoevents.Producer", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return demoevents.NewProducer(db.Pool, db.Schema, time.Hour, pgtest.Logger(t))
	})
}
