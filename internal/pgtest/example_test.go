package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

type pingArgs struct{}

func (pingArgs) Kind() string { return "test.ping" }

// A test on a schema of its own, with a runtime that works its jobs and
// stops when the test ends.
func Example() {
	testPing := func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
			queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[pingArgs]) error { return nil }))
		})
		res, err := rt.Enqueue(context.Background(), pingArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		db.WaitForJobState(t, res.Job.ID, rivertype.JobStateCompleted, 10*time.Second)
	}
	_ = testPing // a test function, so it is compiled, not run
}
