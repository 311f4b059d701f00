// Package tributarytest helps the tests of programs built on tributary, as
// River's rivertest does for River: a migrated schema per test on a real
// PostgreSQL, work run to completion inside the test, and assertions on
// what a transaction enqueued, emitted or started.
//
//	func TestPlaceOrder(t *testing.T) {
//		ctx := context.Background()
//		db := tributarytest.NewDB(t, nil) // TEST_DATABASE_URL, else DATABASE_URL
//		tx, err := db.Pool.Begin(ctx)
//		require.NoError(t, err)
//		defer tx.Rollback(ctx)
//
//		require.NoError(t, placeOrder(ctx, tx, "o-1")) // the code under test
//
//		tributarytest.RequireEnqueuedTx[SendReceiptArgs](ctx, t, tx, nil)
//		tributarytest.RequireEmittedTx(ctx, t, tx, "order.placed", &tributarytest.RequireEmittedOpts{AggregateID: "o-1"})
//		tributarytest.RequireWorkflowStartedTx(ctx, t, tx, "fulfil", nil)
//	}
//
// The database comes from TEST_DATABASE_URL, else DATABASE_URL, else a
// local server on 127.0.0.1:5432. A test that cannot reach it fails with a
// message saying how to start one; it never skips, so a CI run without a
// database is red rather than falsely green.
package tributarytest
