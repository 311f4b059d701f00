package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// CleanupSpecDefault is when the clean-up jobs run.
const CleanupSpecDefault = "@every 1h"

// CleanupConfig configures the clean-up schedules.
type CleanupConfig struct {
	// Targets are the tables to clean, one schedule each (see
	// queue.CleanupTarget); a target whose retention is -1 gets none. Give
	// the Cleaner the same targets.
	//
	// Defaults to none.
	Targets []queue.CleanupTarget

	// Retentions overrides the retention of targets by target name; -1
	// turns a target's schedule off.
	//
	// Defaults to each target's own retention.
	Retentions map[string]time.Duration

	// Spec is when the clean-up jobs run.
	//
	// Defaults to "@every 1h".
	Spec string

	// BatchSize is the number of rows one delete statement removes.
	//
	// Defaults to 5000.
	BatchSize int

	// Queue the clean-up jobs go to.
	//
	// Defaults to "default".
	Queue string
}

// CleanupSchedulePrefix starts the name of every clean-up schedule:
// "tributary.cleanup.outbox_sent" and so on.
const CleanupSchedulePrefix = "tributary.cleanup."

// CleanupSchedules returns the clean-up schedules for cfg: one per target
// whose retention is not -1, in the order of cfg.Targets. Each runs with
// catch-up once (a missed hour is made up by the next run anyway) and
// overlap skip (two runs on one table would only compete for the same
// rows). A target that does not validate, or a retention for a target not
// in cfg.Targets, is an error.
func CleanupSchedules(cfg CleanupConfig) ([]Schedule, error) {
	targets, err := indexTargets(cfg.Targets)
	if err != nil {
		return nil, err
	}
	for name, d := range cfg.Retentions {
		if _, ok := targets[name]; !ok {
			return nil, fmt.Errorf("retention %s given for clean-up target %q, which is not one of %v", d, name, slices.Sorted(maps.Keys(targets)))
		}
		if d == 0 || d < -1 {
			return nil, fmt.Errorf("invalid retention %s for clean-up target %q: must be positive, or -1 to turn it off", d, name)
		}
	}
	spec := cmp.Or(cfg.Spec, CleanupSpecDefault)
	var out []Schedule
	for _, t := range cfg.Targets {
		retention := t.Retention
		if d, ok := cfg.Retentions[t.Name]; ok {
			retention = d
		}
		if retention < 0 {
			continue
		}
		out = append(out, Schedule{
			Name: CleanupSchedulePrefix + t.Name,
			Spec: spec,
			Args: CleanupArgs{
				Target:           t.Name,
				RetentionSeconds: int64(retention / time.Second),
				BatchSize:        cfg.BatchSize,
			},
			InsertOpts: InsertOpts{Queue: cfg.Queue, MaxAttempts: 5},
			CatchUp:    CatchUpOnce,
			Overlap:    OverlapSkip,
		})
	}
	return out, nil
}
