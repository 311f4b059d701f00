// Package riverjob is the one owner of tributary's statements on River's
// tables (river_job, river_queue, ...) and of River's notification channel.
// Every SQL string of tributary that names one of River's tables lives here,
// and a test runs each of them against River's migrations at the pinned
// version (River v0.51.2), so a River upgrade that changes its tables breaks
// this package's tests rather than production. Where River's public API
// does the job (JobCompleteTx, JobRetryTx, InsertManyFastTx, ...), callers
// use that instead; what is here is what River's API lacks: set-based
// changes in the caller's transaction, lookups by job args, read models.
//
// Statements touch River's tables only; what a feature keeps in its own
// tables stays in that feature's package, which passes ids and keys in.
// Each write sets what River itself sets for the same transition (see the
// statements' comments), so River's services (completer, rescuer, cleaner,
// producers) treat the rows as if River had changed them.
//
// The package imports nothing of tributary but migrations, so every other
// package may use it, queue included.
package riverjob
