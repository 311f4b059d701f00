package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// TestOrphanCleanup: the clean-up deletes, in bounded batches, the batch
// rows older than the retention whose job is gone, cancelled or discarded,
// and keeps a row whose job still waits, however old, and a recent orphan.
func TestOrphanCleanup(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	rc := b.db.Client(t).River()
	ids := map[string]int64{}
	for _, name := range []string{"deleted", "cancelled", "discarded", "waiting", "recent"} {
		ids[name] = b.insert(t, messages(2)...)
	}
	jobOf := func(name string) int64 {
		var id int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT job_id FROM /*schema*/tributary_inbox_batch WHERE id = $1`), ids[name]).Scan(&id))
		return id
	}
	_, err := rc.JobDelete(ctx, jobOf("deleted"))
	require.NoError(t, err)
	_, err = rc.JobDelete(ctx, jobOf("recent"))
	require.NoError(t, err)
	_, err = rc.JobCancel(ctx, jobOf("cancelled"))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`), jobOf("discarded"))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_inbox_batch SET created_at = now() - interval '8 days' WHERE id <> $1`), ids["recent"])
	require.NoError(t, err)

	target := inbox.OrphanCleanup()
	require.NoError(t, target.Validate())
	cleaner, err := scheduler.NewCleaner(b.db.Client(t), scheduler.CleanerConfig{Targets: []queue.CleanupTarget{target}})
	require.NoError(t, err)
	res, err := cleaner.Clean(ctx, target.Name, target.Retention, 2)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Deleted)
	require.GreaterOrEqual(t, res.Batches, 2, "bounded batches")

	rows, err := b.db.Pool.Query(ctx, b.db.Q(`SELECT id FROM /*schema*/tributary_inbox_batch ORDER BY id`))
	require.NoError(t, err)
	var left []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{ids["waiting"], ids["recent"]}, left)
}
