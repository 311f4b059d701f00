// Package queue is tributary's hub, the one package every feature builds on:
// the pgx pool, the Client through which
// application code enqueues River jobs (EnqueueTx: in the caller's
// transaction, so a rollback leaves no job), the Runtime that owns a worker
// process's River client and the lifecycle of its Services (started in the
// order they were added, stopped in reverse), the process's liveness
// (heartbeat and sweep), the job read model (ReadJobStats), and the small
// types the features share (DBTX, Qualify, Lifecycle, CleanupTarget).
// It imports no tributary package but migrations.
//
// Example_worker shows a worker process; ExampleClient_EnqueueTx an insert
// in the caller's transaction.
package queue
