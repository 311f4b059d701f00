// Package batch turns items staged in Postgres into gzip-compressed JSON-lines
// objects in a sink (a directory or an S3 bucket).
//
// Producers stage items in their own transaction with a Stager; nothing is
// buffered in memory, so a staged item survives any crash once the
// transaction commits. When a stream reaches its count or byte threshold the
// stager enqueues a flush job for it in the same transaction (one queued job
// per stream at a time), and an AgeTimer enqueues flush jobs for streams whose
// oldest item is older than the stream's maximum age.
//
// The flush job claims a batch (a range of the stream's items, recorded with
// a batch id that fixes the object key), streams the items into
// {prefix}/{stream}/dt=YYYY-MM-DD/hour=HH/{batch-id}.jsonl.gz, and then, in
// the transaction that completes the job, deletes the items and marks the
// object written. A retry after a crash writes the same key again, so every
// item ends up in exactly one object.
//
// ExampleStager_StageTx stages from application code, ExampleRegister runs
// the flushes in a worker, ExampleOpenSink opens a sink.
package batch
