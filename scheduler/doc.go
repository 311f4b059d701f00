// Package scheduler runs cron schedules that survive restarts and replica
// changes, and the built-in clean-up of what tributary stores.
//
// Schedules are declared in code; their state (next run, last run and job,
// paused) lives in the tributary_schedule table. Every replica runs a
// Scheduler service. It sleeps until the earliest next run, then fires each
// due schedule in one transaction that locks the schedule's row (FOR UPDATE
// SKIP LOCKED), inserts the job and advances next_run_at: a fire time is
// handled by exactly one replica, and a crash mid-fire rolls everything back
// for the next replica to redo. Each job carries its schedule and fire time
// in its metadata, and a unique index on that pair makes a second job for
// one fire time impossible. Fire times missed while nothing ran follow the
// schedule's CatchUp policy; a fire while the previous job is unfinished
// follows its Overlap policy. Schedules found in the table but no longer
// declared are reported as orphaned and not fired. Cron fields are read on
// the schedule's wall clock, with a stated rule for the hours that
// daylight saving skips or repeats (Spec.Next); @every is real time.
//
// ExampleScheduler_Add declares schedules.
//
// List, Trigger, Pause and Resume act on the stored schedules without the
// declaring code (the CLI's `tributary schedules`, the dashboard).
//
// Clean-up: each feature exports its tables' clean-up targets
// (queue.CleanupTarget: events.OutboxSentCleanup, batch.ObjectCleanup, ...);
// CleanupSchedules returns one schedule per target and RegisterCleanup the
// worker of their tributary.cleanup jobs, both given the same targets. A
// Cleaner deletes in statements of at most a few thousand rows, each its
// own transaction under a statement timeout, so no statement holds row
// locks for long; each run logs and counts what it removed.
package scheduler
