// Package envconfig is the configuration of tributary's processes (the
// tributary command and the test workers) read from the environment. It is
// the one place that reads tributary's environment variables: it parses
// each one, fills the feature's own Config with it (queue, scheduler, the
// AMQP bridge, the batch flushes, the dashboard) and leaves the defaults to
// the features, whose constants it names where a value must be shown or
// checked. A bad value is a *queue.ConfigError naming the variable and the
// value.
//
//	cfg, err := envconfig.FromEnv()
//	pool, err := queue.NewPool(ctx, cfg.Config)
//	rcfg := cfg.Runtime // then Queues, Logger
package envconfig

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// Defaults of the process's own settings (the features own the others).
const (
	LogLevelDefault  = "info"
	LogFormatDefault = "text"
)

// Config is the process configuration.
type Config struct {
	// Config is where the tables are: DATABASE_URL, TRIBUTARY_SCHEMA, with
	// queue's defaults applied.
	queue.Config

	// Runtime has the worker runtime's settings from the environment:
	// TRIBUTARY_SHUTDOWN_TIMEOUT, TRIBUTARY_RESCUE_STUCK_AFTER,
	// TRIBUTARY_LIVENESS_TIMEOUT, TRIBUTARY_JOB_RETENTION_COMPLETED,
	// _CANCELLED and _DISCARDED ("forever" is -1), and the schema. The
	// process adds queues and a logger.
	Runtime queue.RuntimeConfig

	// AMQP is the bridge's configuration: AMQP_URL (empty: the bridge is
	// off), QUEUE_PREFIX, MAX_MESSAGE_RETRIES (0 is NoRetries),
	// RETRY_BASE_MS, RETRY_MAX_MS and the S3_BATCH_* thresholds of the batch
	// consumer. Use Bridge, which validates it.
	AMQP amqpbridge.Config

	// Batch has the batch flushes' thresholds: S3_BATCH_MAX_EVENTS,
	// S3_BATCH_MAX_BYTES, S3_BATCH_MAX_AGE_MS.
	Batch batch.Config

	// BatchTimerInterval is how often the age timer looks at the streams
	// (S3_BATCH_TIMER_INTERVAL_MS). Zero: batch's default.
	BatchTimerInterval time.Duration

	// BatchSinkURL is where batch objects go (BATCH_SINK_URL), defaulted.
	BatchSinkURL string

	// HTTPAddr is the dashboard's address (TRIBUTARY_HTTP_ADDR), defaulted.
	HTTPAddr string

	// DashboardToken enables dashboard actions (TRIBUTARY_DASHBOARD_TOKEN).
	DashboardToken string

	// DashboardAMQPQueues are the AMQP queues the dashboard shows
	// (TRIBUTARY_DASHBOARD_AMQP_QUEUES, comma-separated).
	DashboardAMQPQueues []string

	// OutboxExchange is the exchange the worker's forwarder also publishes
	// to (TRIBUTARY_OUTBOX_EXCHANGE); empty: none.
	OutboxExchange string

	// AMQPBatchQueue is the queue the worker consumes into batch staging
	// (TRIBUTARY_AMQP_BATCH_QUEUE, QUEUE or QUEUE:STREAM); zero: none.
	AMQPBatchQueue BatchQueue

	// Cleanup has the clean-up schedules' settings: the retentions
	// (TRIBUTARY_OUTBOX_SENT_RETENTION, ...), TRIBUTARY_CLEANUP_SPEC and
	// TRIBUTARY_CLEANUP_BATCH_SIZE. The process adds the targets.
	Cleanup scheduler.CleanupConfig

	// OTLPEndpoint is where traces are exported, over OTLP/HTTP
	// (OTEL_EXPORTER_OTLP_ENDPOINT, an http:// or https:// URL); empty: no
	// exporting. The exporter reads its other OTEL_EXPORTER_OTLP_* settings
	// itself.
	OTLPEndpoint string

	// LogLevel (LOG_LEVEL) and LogFormat (LOG_FORMAT), defaulted.
	LogLevel  string
	LogFormat string

	raw map[string]string // the variables as set, for errors
}

// BatchQueue is a parsed TRIBUTARY_AMQP_BATCH_QUEUE.
type BatchQueue struct {
	Queue  string // logical queue name; the bridge adds QUEUE_PREFIX
	Stream string // batch stream its messages are staged into
}

// String returns q as the variable would say it: QUEUE, or QUEUE:STREAM.
func (q BatchQueue) String() string {
	if q.Stream == q.Queue {
		return q.Queue
	}
	return q.Queue + ":" + q.Stream
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return FromLookup(os.LookupEnv) }

// FromEnvWith reads the configuration from the process environment, where
// a non-empty value of overrides (a command-line flag's, by variable name)
// takes the place of the variable's.
func FromEnvWith(overrides map[string]string) (Config, error) {
	return FromLookup(func(name string) (string, bool) {
		if v := overrides[name]; v != "" {
			return v, true
		}
		return os.LookupEnv(name)
	})
}

// FromLookup reads the configuration through lookup, which has the shape of
// os.LookupEnv. Values are trimmed; an empty one counts as unset.
func FromLookup(lookup func(string) (string, bool)) (Config, error) {
	cfg := Config{raw: map[string]string{}}
	raw := cfg.raw
	for _, v := range variables() {
		value, _ := lookup(v.name)
		value = strings.TrimSpace(value)
		if value == "" {
			continue
		}
		raw[v.name] = value
		if err := v.set(&cfg, value); err != nil {
			return Config{}, &queue.ConfigError{Name: v.name, Value: shown(v, value), Reason: err.Error()}
		}
	}
	cfg.Config = cfg.Config.WithDefaults()
	cfg.Runtime.Schema = cfg.Schema
	cfg.BatchSinkURL = cmp.Or(cfg.BatchSinkURL, batch.SinkURLDefault)
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, dashboard.AddrDefault)
	cfg.LogLevel = cmp.Or(cfg.LogLevel, LogLevelDefault)
	cfg.LogFormat = cmp.Or(cfg.LogFormat, LogFormatDefault)
	// The features' own rules, with the variable that set the field.
	bridge := cfg.AMQP
	if bridge.URL == "" {
		// The bridge is off; its own settings must still be usable (the DLQ
		// commands use them), but the S3_BATCH_* values are then only the
		// flushes', whose limits are not the batch consumer's.
		bridge.BatchMaxEvents, bridge.BatchMaxBytes, bridge.BatchMaxAge, bridge.BatchTimerInterval = 0, 0, 0, 0
	}
	for _, err := range []error{cfg.Config.Validate(), cfg.Runtime.Validate(), bridge.Validate()} {
		if err != nil {
			return Config{}, renamed(err, raw)
		}
	}
	if reason := dashboard.CheckAddr(cfg.HTTPAddr); reason != "" {
		return Config{}, &queue.ConfigError{Name: "TRIBUTARY_HTTP_ADDR", Value: cfg.HTTPAddr, Reason: reason}
	}
	return cfg, nil
}

// Bridge returns the AMQP bridge's configuration with logger, validated: with
// AMQP_URL unset it is the local default broker (the DLQ commands use that).
// A bad value names its variable.
func (c Config) Bridge(logger *slog.Logger) (amqpbridge.Config, error) {
	bcfg := c.AMQP
	bcfg.Logger = logger
	if err := bcfg.Validate(); err != nil {
		return bcfg, renamed(err, c.raw)
	}
	return bcfg, nil
}

// CheckBridgeNeeded returns a *queue.ConfigError naming a variable that only
// works with the bridge (TRIBUTARY_OUTBOX_EXCHANGE,
// TRIBUTARY_AMQP_BATCH_QUEUE) when it is set and AMQP_URL is not. The worker
// calls it; other commands do not use these variables.
func (c Config) CheckBridgeNeeded() error {
	if c.AMQP.URL != "" {
		return nil
	}
	switch {
	case c.OutboxExchange != "":
		return &queue.ConfigError{Name: "TRIBUTARY_OUTBOX_EXCHANGE", Value: c.OutboxExchange, Reason: "needs AMQP_URL"}
	case c.AMQPBatchQueue.Queue != "":
		return &queue.ConfigError{Name: "TRIBUTARY_AMQP_BATCH_QUEUE", Value: c.AMQPBatchQueue.String(), Reason: "needs AMQP_URL"}
	}
	return nil
}

// NewLogger builds the slog logger LOG_LEVEL and LOG_FORMAT ask for, writing
// to w.
func (c Config) NewLogger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ParseQueueNames parses the comma-separated AMQP queue names of
// TRIBUTARY_DASHBOARD_AMQP_QUEUES (or the dashboard's --amqp-queues).
func ParseQueueNames(raw string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(raw, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if strings.ContainsAny(n, " \t/") {
			return nil, fmt.Errorf("AMQP queue name %q has a space or a slash (QUEUE_PREFIX adds the prefix)", n)
		}
		names = append(names, n)
	}
	return names, nil
}

const dashboardAMQPQueuesVar = "TRIBUTARY_DASHBOARD_AMQP_QUEUES"

// variable is one environment variable: its name and how its value (set,
// trimmed, not empty) goes into the Config.
type variable struct {
	name   string
	field  string // the Config field it sets, as the feature's Validate names it
	secret bool   // a URL that may carry a password: errors show it redacted
	set    func(c *Config, raw string) error
}

// variables lists every environment variable tributary reads. A new one is
// a line here and a row in the README's configuration tables
// (TestREADMEConfigurationTables checks both ways).
func variables() []variable {
	return []variable{
		{name: "DATABASE_URL", field: "DatabaseURL", secret: true, set: func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
		{name: "TRIBUTARY_SCHEMA", field: "Schema", set: func(c *Config, v string) error { c.Schema = v; return nil }},
		{name: "OTEL_EXPORTER_OTLP_ENDPOINT", secret: true, set: func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return errors.New("want an http:// or https:// URL such as http://127.0.0.1:4318")
			}
			c.OTLPEndpoint = v
			return nil
		}},
		{name: "TRIBUTARY_SHUTDOWN_TIMEOUT", field: "ShutdownTimeout", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.ShutdownTimeout }, time.Nanosecond, false)},
		{name: "TRIBUTARY_JOB_RETENTION_COMPLETED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.CompletedJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_JOB_RETENTION_CANCELLED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.CancelledJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_JOB_RETENTION_DISCARDED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.DiscardedJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_LIVENESS_TIMEOUT", field: "LivenessTimeout", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.LivenessTimeout }, time.Nanosecond, false)},
		{name: "TRIBUTARY_FETCH_COOLDOWN", field: "FetchCooldown", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.FetchCooldown }, time.Nanosecond, false)},
		{name: "TRIBUTARY_FETCH_POLL_INTERVAL", field: "FetchPollInterval", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.FetchPollInterval }, time.Nanosecond, false)},
		{name: "TRIBUTARY_RESCUE_STUCK_AFTER", field: "RescueStuckJobsAfter", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.RescueStuckJobsAfter }, time.Nanosecond, false)},
		{name: "AMQP_URL", field: "URL", secret: true, set: func(c *Config, v string) error { c.AMQP.URL = v; return nil }},
		{name: "QUEUE_PREFIX", field: "QueuePrefix", set: func(c *Config, v string) error { c.AMQP.QueuePrefix = v; return nil }},
		{name: "MAX_MESSAGE_RETRIES", field: "MaxMessageRetries", set: func(c *Config, v string) error {
			n, err := parseInt(v, 0, math.MaxInt32)
			// 0 is an explicit choice here, where the bridge's zero means its
			// default.
			c.AMQP.MaxMessageRetries = cmp.Or(n, amqpbridge.NoRetries)
			return err
		}},
		{name: "RETRY_BASE_MS", field: "RetryBase", set: millisInto(func(c *Config) []*time.Duration { return []*time.Duration{&c.AMQP.RetryBase} })},
		{name: "RETRY_MAX_MS", field: "RetryMax", set: millisInto(func(c *Config) []*time.Duration { return []*time.Duration{&c.AMQP.RetryMax} })},
		{name: "S3_BATCH_MAX_EVENTS", field: "BatchMaxEvents", set: func(c *Config, v string) error {
			n, err := parseInt(v, 1, math.MaxInt32)
			c.Batch.Defaults.MaxEvents, c.AMQP.BatchMaxEvents = n, n
			return err
		}},
		{name: "S3_BATCH_MAX_BYTES", field: "BatchMaxBytes", set: func(c *Config, v string) error {
			n, err := parseInt(v, 1, math.MaxInt)
			c.Batch.Defaults.MaxBytes, c.AMQP.BatchMaxBytes = int64(n), n
			return err
		}},
		{name: "S3_BATCH_MAX_AGE_MS", field: "BatchMaxAge", set: millisInto(func(c *Config) []*time.Duration {
			return []*time.Duration{&c.Batch.Defaults.MaxAge, &c.AMQP.BatchMaxAge}
		})},
		{name: "S3_BATCH_TIMER_INTERVAL_MS", field: "BatchTimerInterval", set: millisInto(func(c *Config) []*time.Duration {
			return []*time.Duration{&c.BatchTimerInterval, &c.AMQP.BatchTimerInterval}
		})},
		{name: "BATCH_SINK_URL", secret: true, set: func(c *Config, v string) error {
			c.BatchSinkURL = v
			return batch.CheckSinkURL(v)
		}},
		{name: "TRIBUTARY_HTTP_ADDR", set: func(c *Config, v string) error { c.HTTPAddr = v; return nil }},
		{name: "TRIBUTARY_DASHBOARD_TOKEN", set: func(c *Config, v string) error { c.DashboardToken = v; return nil }},
		{name: dashboardAMQPQueuesVar, set: func(c *Config, v string) (err error) {
			c.DashboardAMQPQueues, err = ParseQueueNames(v)
			return err
		}},
		{name: "TRIBUTARY_OUTBOX_EXCHANGE", set: func(c *Config, v string) error {
			if strings.ContainsAny(v, " \t/") {
				return errors.New("no spaces or slashes")
			}
			c.OutboxExchange = v
			return nil
		}},
		{name: "TRIBUTARY_AMQP_BATCH_QUEUE", set: func(c *Config, v string) (err error) {
			c.AMQPBatchQueue, err = parseBatchQueue(v)
			return err
		}},
		{name: "LOG_LEVEL", set: func(c *Config, v string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return errors.New("want debug, info, warn or error")
			}
			c.LogLevel = v
			return nil
		}},
		{name: "LOG_FORMAT", set: func(c *Config, v string) error {
			if v != "text" && v != "json" {
				return errors.New("want text or json")
			}
			c.LogFormat = v
			return nil
		}},
		retentionVariable("TRIBUTARY_OUTBOX_SENT_RETENTION", events.OutboxSentCleanup()),
		retentionVariable("TRIBUTARY_OUTBOX_FAILED_RETENTION", events.OutboxFailedCleanup()),
		retentionVariable("TRIBUTARY_EVENT_LANE_RETENTION", events.IdleLaneCleanup()),
		retentionVariable("TRIBUTARY_BATCH_OBJECT_RETENTION", batch.ObjectCleanup()),
		retentionVariable("TRIBUTARY_WORKFLOW_RETENTION", workflow.Cleanup()),
		{name: "TRIBUTARY_CLEANUP_SPEC", set: func(c *Config, v string) error {
			if _, err := scheduler.ParseSpec(v, ""); err != nil {
				return err
			}
			c.Cleanup.Spec = v
			return nil
		}},
		{name: "TRIBUTARY_CLEANUP_BATCH_SIZE", set: func(c *Config, v string) (err error) {
			c.Cleanup.BatchSize, err = parseInt(v, 1, 1_000_000)
			return err
		}},
	}
}

// retentionVariable sets the retention of the clean-up target t.
func retentionVariable(name string, t queue.CleanupTarget) variable {
	return variable{name: name, set: func(c *Config, v string) error {
		d, err := parseDuration(v, time.Second, true)
		if err != nil {
			return err
		}
		if c.Cleanup.Retentions == nil {
			c.Cleanup.Retentions = map[string]time.Duration{}
		}
		c.Cleanup.Retentions[t.Name] = d
		return nil
	}}
}

// renamed turns a feature's *queue.ConfigError on a field into one on the
// variable that set it, with the value as written where raw has it.
func renamed(err error, raw map[string]string) error {
	var ce *queue.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	for _, v := range variables() {
		if v.field == "" || v.field != ce.Name {
			continue
		}
		out := *ce
		out.Name = v.name
		if value, ok := raw[v.name]; ok && !v.secret {
			out.Value = value
		}
		return &out
	}
	return err
}

// shown is the value as an error may show it.
func shown(v variable, raw string) string {
	if v.secret {
		return queue.RedactURL(raw)
	}
	return raw
}

// parseInt parses a whole number from lo to hi.
func parseInt(raw string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		if hi >= math.MaxInt32 {
			return 0, fmt.Errorf("want a whole number of at least %d", lo)
		}
		return 0, fmt.Errorf("want a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

// millisInto sets every duration dst returns from a whole number of
// milliseconds, at least 1 (the Node service's variables ending in _MS).
func millisInto(dst func(c *Config) []*time.Duration) func(c *Config, raw string) error {
	return func(c *Config, raw string) error {
		n, err := parseInt(raw, 1, math.MaxInt32)
		for _, d := range dst(c) {
			*d = time.Duration(n) * time.Millisecond
		}
		return err
	}
}

// durationInto sets *dst(c) from the one duration syntax (see
// parseDuration).
func durationInto(dst func(c *Config) *time.Duration, lo time.Duration, forever bool) func(c *Config, raw string) error {
	return func(c *Config, raw string) error {
		d, err := parseDuration(raw, lo, forever)
		*dst(c) = d
		return err
	}
}

// batchQueueNameRE allows what a stream name allows, so the queue name can
// be the default stream name.
var batchQueueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// parseBatchQueue parses QUEUE or QUEUE:STREAM.
func parseBatchQueue(raw string) (BatchQueue, error) {
	name, stream, hasStream := strings.Cut(raw, ":")
	if !hasStream {
		stream = name
	}
	if !batchQueueNameRE.MatchString(name) || batch.ValidateStream(stream) != nil {
		return BatchQueue{}, errors.New("want QUEUE or QUEUE:STREAM, each of letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters")
	}
	return BatchQueue{Queue: name, Stream: stream}, nil
}
