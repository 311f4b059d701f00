package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// TestConcurrencyKeyOrder inserts four workflows of one key with limit 1:
// the first runs, the others wait queued with their jobs pending (no slot
// held), and they run one at a time in insert order.
func TestConcurrencyKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 4
	ids := make([]string, n)
	jobs := make([]int64, n)
	for i := range n {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "customer-7"})
		wf.Add("t", stepArgs{Name: fmt.Sprint("t", i), Wait: true}, nil)
		wf.Add("after", stepArgs{Name: fmt.Sprint("after", i)}, &workflow.TaskOpts{Deps: []string{"t"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, i > 0, res.Queued, "workflow %d queued", i)
		ids[i], jobs[i] = res.ID, res.Jobs["t"]
	}
	// Another key is not held up.
	other := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "customer-8"})
	other.Add("t", stepArgs{Name: "other"}, nil)
	ores, err := b.client.Insert(ctx, other)
	require.NoError(t, err)
	require.False(t, ores.Queued)
	b.waitStatus(t, ores.ID, workflow.StatusCompleted)

	for i := range n {
		require.Equal(t, fmt.Sprint("t", i), nextStarted(t, b, "t"), "workflow %d runs next", i)
		for j := i + 1; j < n; j++ {
			var state string
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT state::text FROM "+b.db.Schema+".river_job WHERE id = $1", jobs[j]).Scan(&state))
			require.Equal(t, "pending", state, "workflow %d waits holding no slot", j)
		}
		b.worker.Release(fmt.Sprint("t", i))
		b.waitStatus(t, ids[i], workflow.StatusCompleted)
	}
}

// nextStarted returns the next started step whose name starts with prefix.
func nextStarted(t *testing.T, b *testBundle, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case name := <-b.worker.started:
			if len(name) >= len(prefix) && name[:len(prefix)] == prefix && name != "other" {
				return name
			}
		case <-timeout:
			t.Fatalf("no step %s... started", prefix)
		}
	}
}

func TestConcurrencyKeyCancelFreesSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "k", ConcurrencyLimit: 1})
	first.Add("t", stepArgs{Name: "first", Wait: true}, nil)
	r1, err := b.client.Insert(ctx, first)
	require.NoError(t, err)
	second := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "k", ConcurrencyLimit: 1})
	second.Add("t", stepArgs{Name: "second"}, nil)
	r2, err := b.client.Insert(ctx, second)
	require.NoError(t, err)
	require.True(t, r2.Queued)
	_, err = b.client.Cancel(ctx, r1.ID)
	require.NoError(t, err)
	b.waitStatus(t, r2.ID, workflow.StatusCompleted)

	err = workflow.New("bad", &workflow.Opts{ConcurrencyLimit: 2}).Validate()
	require.ErrorContains(t, err, "invalid ConcurrencyLimit 2")
}
