package queue

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// CleanupTarget is a table whose old rows its feature lets the scheduled
// clean-up delete. Each feature exports its targets with its own default
// retention (events.OutboxSentCleanup, batch.ObjectCleanup, ...); the
// process lists the ones it cleans (scheduler.CleanupConfig.Targets), and
// the Cleaner deletes their rows in bounded batches.
type CleanupTarget struct {
	// Name identifies the target in clean-up jobs, schedule names
	// ("tributary.cleanup.NAME"), logs and metrics. Changing it orphans the
	// stored schedule.
	Name string

	// Table is the table, without its schema.
	Table string

	// Where selects the rows that may go, $1 being the cut-off time (now
	// minus the retention), as SQL on Table's columns.
	Where string

	// OrderBy orders each batch's selection (the oldest rows first through
	// an index), for tables where an unordered LIMIT would read the whole
	// table when few rows qualify.
	//
	// Defaults to none: any matching rows.
	OrderBy string

	// Retention is how long rows are kept, measured from the time Where
	// compares with the cut-off; -1 keeps them (no schedule).
	Retention time.Duration

	// DeleteFunc, when set, deletes one batch in place of the generic
	// DELETE of Where's rows: at most limit rows older than cutoff, in tx,
	// returning how many. A target that archives its rows records the
	// archive in tx (workflow.ArchiveCleanup writes an object before the
	// delete and records it in tx), so the record and the delete commit
	// together or not at all.
	//
	// Defaults to the generic DELETE.
	DeleteFunc func(ctx context.Context, tx pgx.Tx, schema string, cutoff time.Time, limit int) (int64, error)
}

var cleanupIdentRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Validate reports a target that the Cleaner cannot use, naming it.
func (t CleanupTarget) Validate() error {
	switch {
	case !cleanupIdentRE.MatchString(t.Name):
		return fmt.Errorf("invalid clean-up target name %q: use lower-case letters, digits and underscores", t.Name)
	case !cleanupIdentRE.MatchString(t.Table):
		return fmt.Errorf("invalid table %q for clean-up target %q: use lower-case letters, digits and underscores", t.Table, t.Name)
	case t.Where == "":
		return fmt.Errorf("clean-up target %q has no condition", t.Name)
	case t.Retention == 0 || t.Retention < -1:
		return fmt.Errorf("invalid retention %s for clean-up target %q: must be positive, or -1 to keep the rows", t.Retention, t.Name)
	}
	return nil
}
