package workflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
)

type orderPlaced struct {
	OrderID string `json:"order_id"`
}

var orderPlacedEvent = events.Define[orderPlaced]("wftest.order_placed", nil)

// rowCounts counts the app's rows, outbox events, workflows, tasks and jobs.
func rowCounts(t *testing.T, db *pgtest.DB) [5]int {
	t.Helper()
	var n [5]int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT
        (SELECT count(*) FROM /*schema*/app_order), (SELECT count(*) FROM /*schema*/tributary_outbox),
        (SELECT count(*) FROM /*schema*/tributary_workflow), (SELECT count(*) FROM /*schema*/tributary_workflow_task),
        (SELECT count(*) FROM /*schema*/river_job)`)).Scan(&n[0], &n[1], &n[2], &n[3], &n[4]))
	return n
}

func TestInsertAtomicWithAppRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`CREATE TABLE /*schema*/app_order (id text PRIMARY KEY)`))
	require.NoError(t, err)
	reg, err := events.NewRegistry(orderPlacedEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: b.db.Schema, Registry: reg})
	require.NoError(t, err)

	// One transaction: the domain row, an outbox event and the workflow.
	placeOrder := func(tx pgx.Tx, id string) (*workflow.InsertResult, error) {
		if _, err := tx.Exec(ctx, b.db.Q(`INSERT INTO /*schema*/app_order (id) VALUES ($1)`), id); err != nil {
			return nil, err
		}
		if _, err := em.EmitTx(ctx, tx, orderPlacedEvent, orderPlaced{OrderID: id}, events.Meta{AggregateID: id}); err != nil {
			return nil, err
		}
		return b.client.InsertTx(ctx, tx, diamond("order", &workflow.Opts{ID: "order-" + id}))
	}

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		res, err := placeOrder(tx, "1")
		require.NoError(t, err)
		require.Len(t, res.Jobs, 4)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, [5]int{}, rowCounts(t, b.db), "no order, event, workflow, task or job")
		_, err = b.client.Get(ctx, "order-1")
		require.ErrorIs(t, err, workflow.ErrNotFound)
		require.ErrorContains(t, err, `no workflow with id or key "order-1"`)
	})

	t.Run("CommitRunsTheWorkflow", func(t *testing.T) {
		var res *workflow.InsertResult
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			var err error
			res, err = placeOrder(tx, "2")
			return err
		}))
		require.Equal(t, [5]int{1, 1, 1, 4, 4}, rowCounts(t, b.db))
		d := b.waitStatus(t, "order-2", workflow.StatusCompleted)
		require.Equal(t, res.ID, d.ID)
		require.Equal(t, "order-2", d.Key)
		require.Equal(t, "order", d.Name)
		require.NotNil(t, d.FinishedAt)
	})
}

func TestIdempotentStart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := workflow.NewClient(db.Client(t))
	ctx := context.Background()

	first, err := client.Insert(ctx, diamond("order", &workflow.Opts{ID: "order-42"}))
	require.NoError(t, err)
	require.False(t, first.Existing)
	jobs := db.CountJobs(t)

	t.Run("ConflictFails", func(t *testing.T) {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = client.InsertTx(ctx, tx, diamond("order", &workflow.Opts{ID: "order-42"}))
		require.ErrorIs(t, err, workflow.ErrKeyConflict)
		var ce *workflow.ConflictError
		require.True(t, errors.As(err, &ce))
		require.Equal(t, first.ID, ce.ExistingID)
		require.Equal(t, workflow.StatusRunning, ce.Status)
		require.ErrorContains(t, err, `workflow key "order-42" is taken by workflow `+first.ID)
		// The caller's transaction goes on: the insert ran in a savepoint.
		var one int
		require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one))
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, jobs, db.CountJobs(t), "nothing inserted")
	})

	t.Run("ReturnExisting", func(t *testing.T) {
		res, err := client.Insert(ctx, diamond("order", &workflow.Opts{ID: "order-42", OnConflict: workflow.ConflictReturnExisting}))
		require.NoError(t, err)
		require.True(t, res.Existing)
		require.Equal(t, first.ID, res.ID)
		require.Nil(t, res.Jobs)
		require.Equal(t, jobs, db.CountJobs(t), "nothing inserted")
	})

	t.Run("ConcurrentStartsInsertOnce", func(t *testing.T) {
		// Eight inserts race for one key: the unique index makes all but
		// one wait for the winner's commit and then return it.
		const n = 8
		var wg sync.WaitGroup
		results := make([]*workflow.InsertResult, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = client.Insert(ctx, diamond("order", &workflow.Opts{ID: "order-43", OnConflict: workflow.ConflictReturnExisting}))
			}()
		}
		wg.Wait()
		inserted := 0
		for i := range n {
			require.NoError(t, errs[i])
			if !results[i].Existing {
				inserted++
			}
			require.Equal(t, results[0].ID, results[i].ID)
		}
		require.Equal(t, 1, inserted)
		require.Equal(t, jobs+4, db.CountJobs(t))
	})

	t.Run("NoKeyAlwaysInserts", func(t *testing.T) {
		a, err := client.Insert(ctx, diamond("order", nil))
		require.NoError(t, err)
		b, err := client.Insert(ctx, diamond("order", nil))
		require.NoError(t, err)
		require.NotEqual(t, a.ID, b.ID)
	})
}
