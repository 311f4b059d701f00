package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Defaults for CleanupConfig.
const (
	OutboxSentRetentionDefault   = 7 * 24 * time.Hour
	OutboxFailedRetentionDefault = 30 * 24 * time.Hour
	EventLaneRetentionDefault    = 7 * 24 * time.Hour
	BatchObjectRetentionDefault  = 30 * 24 * time.Hour
	CleanupSpecDefault           = "@every 1h"
)

// CleanupConfig configures the built-in clean-up schedules. A retention of
// -1 turns that target's schedule off.
type CleanupConfig struct {
	// OutboxSentRetention keeps SENT outbox rows this long after sent_at
	// (TRIBUTARY_OUTBOX_SENT_RETENTION).
	//
	// Defaults to 7 days.
	OutboxSentRetention time.Duration

	// OutboxFailedRetention keeps FAILED outbox rows this long after
	// failed_at (TRIBUTARY_OUTBOX_FAILED_RETENTION).
	//
	// Defaults to 30 days.
	OutboxFailedRetention time.Duration

	// EventLaneRetention keeps idle per-aggregate ordering lanes this long
	// after their last event (TRIBUTARY_EVENT_LANE_RETENTION).
	//
	// Defaults to 7 days.
	EventLaneRetention time.Duration

	// BatchObjectRetention keeps batch object records this long after
	// written_at (TRIBUTARY_BATCH_OBJECT_RETENTION).
	//
	// Defaults to 30 days.
	BatchObjectRetention time.Duration

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

// CleanupSchedulePrefix starts the name of every built-in clean-up schedule:
// "tributary.cleanup.outbox_sent" and so on.
const CleanupSchedulePrefix = "tributary.cleanup."

// CleanupSchedules returns the built-in clean-up schedules for cfg: one per
// target whose retention is not -1. Each runs with catch-up once (a missed
// hour is made up by the next run anyway) and overlap skip (two runs on one
// table would only compete for the same rows).
func CleanupSchedules(cfg CleanupConfig) []Schedule {
	spec := cfg.Spec
	if spec == "" {
		spec = CleanupSpecDefault
	}
	targets := []struct {
		name      string
		retention time.Duration
		def       time.Duration
	}{
		{TargetOutboxSent, cfg.OutboxSentRetention, OutboxSentRetentionDefault},
		{TargetOutboxFailed, cfg.OutboxFailedRetention, OutboxFailedRetentionDefault},
		{TargetEventLanes, cfg.EventLaneRetention, EventLaneRetentionDefault},
		{TargetBatchObjects, cfg.BatchObjectRetention, BatchObjectRetentionDefault},
	}
	var out []Schedule
	for _, t := range targets {
		retention := t.retention
		if retention == 0 {
			retention = t.def
		}
		if retention < 0 {
			continue
		}
		out = append(out, Schedule{
			Name: CleanupSchedulePrefix + t.name,
			Spec: spec,
			Args: CleanupArgs{
				Target:           t.name,
				RetentionSeconds: int64(retention / time.Second),
				BatchSize:        cfg.BatchSize,
			},
			InsertOpts: InsertOpts{Queue: cfg.Queue, MaxAttempts: 5},
			CatchUp:    CatchUpOnce,
			Overlap:    OverlapSkip,
		})
	}
	return out
}

// CleanupConfigFromLookup reads the clean-up settings through lookup (shaped
// like os.LookupEnv). Retentions are Go durations ("168h"), whole days
// ("7d"), or -1/"off" to turn the target off. A bad value is a
// *queue.ConfigError naming the variable and the value.
func CleanupConfigFromLookup(lookup func(string) (string, bool)) (CleanupConfig, error) {
	var cfg CleanupConfig
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	for _, r := range []struct {
		name string
		dst  *time.Duration
	}{
		{"TRIBUTARY_OUTBOX_SENT_RETENTION", &cfg.OutboxSentRetention},
		{"TRIBUTARY_OUTBOX_FAILED_RETENTION", &cfg.OutboxFailedRetention},
		{"TRIBUTARY_EVENT_LANE_RETENTION", &cfg.EventLaneRetention},
		{"TRIBUTARY_BATCH_OBJECT_RETENTION", &cfg.BatchObjectRetention},
	} {
		raw := get(r.name)
		if raw == "" {
			continue
		}
		d, err := parseRetention(raw)
		if err != nil {
			return cfg, &queue.ConfigError{Name: r.name, Value: raw, Reason: err.Error()}
		}
		*r.dst = d
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
