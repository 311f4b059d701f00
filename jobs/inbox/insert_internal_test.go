package inbox

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestInsertWritesWhatRiverWrites: the inbox's own insert of a batch job
// (one statement with its row, riverjob.NewJobInsert) writes the row
// River's Insert writes for the same args and options: default and named
// queues, default and explicit max attempts (up to the smallint column's
// limit), several batches in a row. The rows compare every column an
// insert decides (riverjob.JobRows).
func TestInsertWritesWhatRiverWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	configs := []Config{
		{Name: "orders"},
		{Name: "billing.v2", Queue: "inbox_q", MaxAttempts: 3},
		{Name: "max", Queue: "a-b", MaxAttempts: math.MaxInt16},
	}
	own, viaRiver := pgtest.New(t), pgtest.New(t)
	rc := viaRiver.Client(t).River()
	for i, cfg := range configs {
		cfg.HandleFunc = func(context.Context, *Message) error { return nil }
		ib, err := New(cfg)
		require.NoError(t, err)
		w, err := ib.Writer(own.Schema)
		require.NoError(t, err)
		n := i + 2
		require.NoError(t, pgx.BeginFunc(ctx, own.Pool, func(tx pgx.Tx) error {
			b := NewBatch()
			defer b.Release()
			for j := range n {
				require.NoError(t, b.Add(&Message{ID: fmt.Sprint(j), Body: []byte{byte(j)}}))
			}
			id, err := w.InsertTx(ctx, tx, b)
			require.Equal(t, int64(i+1), id)
			return err
		}))
		c := ib.Config()
		_, err = rc.Insert(ctx, batchArgs{Inbox: c.Name, Batch: int64(i + 1), From: 0, Count: n},
			&river.InsertOpts{Queue: c.Queue, MaxAttempts: c.MaxAttempts})
		require.NoError(t, err)
	}
	want := viaRiver.JobRows(t)
	require.Len(t, want, len(configs))
	require.Equal(t, want, own.JobRows(t))

	// And the row names its job, created by the code's clock.
	var jobID, firstJob int64
	var createdAt time.Time
	require.NoError(t, own.Pool.QueryRow(ctx, own.Q(`SELECT job_id, created_at FROM /*schema*/tributary_inbox_batch WHERE id = 1`)).Scan(&jobID, &createdAt))
	require.NoError(t, own.Pool.QueryRow(ctx, own.Q(`SELECT min(id) FROM /*schema*/river_job`)).Scan(&firstJob))
	require.Equal(t, firstJob, jobID)
	require.WithinDuration(t, time.Now(), createdAt, time.Minute)
}
