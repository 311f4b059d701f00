package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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

	// Spec is when the clean-up jobs run (TRIBUTARY_CLEANUP_SPEC).
	//
	// Defaults to "@every 1h".
	Spec string

	// BatchSize is the number of rows one delete statement removes
	// (TRIBUTARY_CLEANUP_BATCH_SIZE).
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

// CleanupConfigFromLookup reads the clean-up settings through lookup (shaped
// like os.LookupEnv). Retentions are Go durations ("168h"), whole days
// ("7d"), or -1/"off" to turn the target off. A bad value is a
// *queue.ConfigError naming the variable and the value.
func CleanupConfigFromLookup(lookup func(string) (string, bool)) (CleanupConfig, error) {
	cfg := CleanupConfig{Retentions: map[string]time.Duration{}}
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	for _, r := range []struct{ name, target string }{
		{"TRIBUTARY_OUTBOX_SENT_RETENTION", "outbox_sent"},
		{"TRIBUTARY_OUTBOX_FAILED_RETENTION", "outbox_failed"},
		{"TRIBUTARY_EVENT_LANE_RETENTION", "event_lanes"},
		{"TRIBUTARY_BATCH_OBJECT_RETENTION", "batch_objects"},
	} {
		raw := get(r.name)
		if raw == "" {
			continue
		}
		d, err := parseRetention(raw)
		if err != nil {
			return cfg, &queue.ConfigError{Name: r.name, Value: raw, Reason: err.Error()}
		}
		cfg.Retentions[r.target] = d
	}
	if raw := get("TRIBUTARY_CLEANUP_SPEC"); raw != "" {
		if _, err := ParseSpec(raw, ""); err != nil {
			return cfg, &queue.ConfigError{Name: "TRIBUTARY_CLEANUP_SPEC", Value: raw, Reason: err.Error()}
		}
		cfg.Spec = raw
	}
	if raw := get("TRIBUTARY_CLEANUP_BATCH_SIZE"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 1_000_000 {
			return cfg, &queue.ConfigError{Name: "TRIBUTARY_CLEANUP_BATCH_SIZE", Value: raw, Reason: "want a whole number from 1 to 1000000"}
		}
		cfg.BatchSize = n
	}
	return cfg, nil
}

// parseRetention parses "168h", "7d", "-1" or "off".
func parseRetention(raw string) (time.Duration, error) {
	switch strings.ToLower(raw) {
	case "-1", "off":
		return -1, nil
	}
	if days, ok := strings.CutSuffix(raw, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("want a positive number of days such as 7d, a Go duration such as 168h, or -1 to turn it off")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("want a Go duration of at least 1s such as 168h, whole days such as 7d, or -1 to turn it off")
	}
	return d, nil
}
