package riverjob_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// TestCopyNewJobsChunks inserts enough jobs, some with arguments larger
// than the COPY's 64 KiB chunk, for CopyNewJobs's encoder to cut its data
// many times, and reads back every job's arguments, kind, queue and
// scheduled time in id order: a tuple split wrongly at a chunk's edge, or
// a field's length off by one, fails here or in Postgres.
func TestCopyNewJobsChunks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now()
	later := now.Add(time.Hour).Round(time.Microsecond)
	jobs := make([]riverjob.NewJob, 1500)
	for i := range jobs {
		pad := strings.Repeat("x", i%97)
		if i%500 == 7 {
			pad = strings.Repeat("é", 70_000) // one job's args over a chunk
		}
		jobs[i] = riverjob.NewJob{
			Kind: fmt.Sprintf("copy.kind%d", i%3), Args: fmt.Appendf(nil, `{"i": %d, "pad": %q}`, i, pad),
			Queue: "default", Priority: int16(1 + i%4), MaxAttempts: int16(1 + i%25),
		}
		if i%11 == 0 {
			jobs[i].ScheduledAt = later
		}
	}
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	n, err := riverjob.CopyNewJobs(ctx, tx, f.db.Schema, jobs, now)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.EqualValues(t, len(jobs), n)

	rows, err := f.db.Pool.Query(ctx, f.db.Q(`SELECT args->>'i', args->>'pad', kind, priority, max_attempts, state, scheduled_at FROM /*schema*/river_job ORDER BY id`))
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for rows.Next() {
		var idx, pad, kind, state string
		var priority, attempts int16
		var at time.Time
		require.NoError(t, rows.Scan(&idx, &pad, &kind, &priority, &attempts, &state, &at))
		j := jobs[i]
		require.Equal(t, fmt.Sprint(i), idx)
		require.Equal(t, fmt.Sprintf(`{"i": %d, "pad": %q}`, i, pad), string(j.Args), "job %d", i)
		require.Equal(t, j.Kind, kind)
		require.Equal(t, j.Priority, priority)
		require.Equal(t, j.MaxAttempts, attempts)
		if j.ScheduledAt.IsZero() {
			require.Equal(t, "available", state, "job %d", i)
			require.WithinDuration(t, now, at, time.Millisecond)
		} else {
			require.Equal(t, "scheduled", state, "job %d", i)
			require.True(t, later.Equal(at), "job %d: scheduled at %v, want %v", i, at, later)
		}
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(jobs), i)
}
