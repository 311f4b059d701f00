package tributarytest_test

import (
	"testing"

	"github.com/tributary-run/tributary/internal/outsidemod"
)

// TestFromAnotherModule runs, in a temporary module of its own that
// requires this checkout through a replace directive, the tests of a
// user's program (testdata/shop) that use tributarytest: that a
// transaction enqueued a job, emitted an event and started a workflow, and
// that the workflow ran to completion.
func TestFromAnotherModule(t *testing.T) {
	t.Parallel()
	dir := outsidemod.New(t, "example.com/shop", "testdata/shop")
	out := outsidemod.Go(t, dir, "test", "-count=1", "-v", "./...")
	t.Logf("go test in the outside module:\n%s", out)
}
