package demo_test

import (
	"testing"
	"time"

	"github.com/tributary-run/tributary/internal/demo"
	"github.com/tributary-run/tributary/internal/eventdemo"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

// TestServiceContract covers both demo producers, the jobs one and the
// events one (package eventdemo has no tests of its own).
func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "demo.Producer", func(t *testing.T) (queue.Service, error) {
		return demo.NewProducer(pgtest.New(t).Client(t), time.Hour), nil
	})
	servicetest.Run(t, "eventdemo.Producer", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return eventdemo.NewProducer(db.Pool, db.Schema, time.Hour, pgtest.Logger(t))
	})
}
