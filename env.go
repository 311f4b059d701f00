package tributary

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

// ConfigFromEnv reads a Config from the process environment: the
// variables of docs/configuration.md (DATABASE_URL,
// TRIBUTARY_SCHEMA, AMQP_URL, BATCH_SINK_URL, S3_BATCH_*, the retentions,
// ...). It is the one place that reads them. Values are trimmed; an empty
// one counts as unset. A bad value is a *queue.ConfigError naming the
// variable and the value, and so is an error of New about a field a
// variable set.
//
// DatabaseURL and Schema get queue's defaults, Batch.SinkURL gets
// batch.SinkURLDefault (the process flushes batch objects into
// ./.tributary/batches) and LogLevel and LogFormat get info and text; the
// other fields keep their zero value, which New and the features default.
// Declare the rest (Workers, Consumers, Schedules, ...) in code on the
// returned Config.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.LookupEnv) }

// ConfigFromEnvWith is ConfigFromEnv where a non-empty value of overrides
// (a command-line flag's, by variable name) takes the variable's place.
func ConfigFromEnvWith(overrides map[string]string) (Config, error) {
	return ConfigFromLookup(func(name string) (string, bool) {
		if v := overrides[name]; v != "" {
			return v, true
		}
		return os.LookupEnv(name)
	})
}

// ConfigFromLookup is ConfigFromEnv reading through lookup, which has the
// shape of os.LookupEnv (tests, or command-line flags over the
// environment).
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	cfg := Config{env: map[string]string{}}
	for _, v := range variables() {
		value, _ := lookup(v.name)
		value = strings.TrimSpace(value)
		if value == "" {
			continue
		}
		cfg.env[v.name] = value
		if err := v.set(&cfg, value); err != nil {
			return Config{}, &queue.ConfigError{Name: v.name, Value: shown(v, value), Reason: err.Error()}
		}
	}
	cfg.Batch.SinkURL = cmp.Or(cfg.Batch.SinkURL, batch.SinkURLDefault)
	cfg.LogLevel = cmp.Or(cfg.LogLevel, LogLevelDefault)
	cfg.LogFormat = cmp.Or(cfg.LogFormat, LogFormatDefault)
	// The features' own rules, with the variable that set the field; the
	// rest (what needs AMQP_URL, ...) New checks, for the processes that
	// use it.
	qc := queue.Config{DatabaseURL: cfg.DatabaseURL, Schema: cfg.Schema}.WithDefaults()
	cfg.DatabaseURL, cfg.Schema = qc.DatabaseURL, qc.Schema
	rt := cfg.Runtime
	rt.Schema = qc.Schema
	bridge := cfg.AMQP.Bridge
	if bridge.URL == "" {
		// The bridge is off; its own settings must still be usable (the DLQ
		// commands use them), but the S3_BATCH_* values are then only the
		// flushes', whose limits are not the batch consumer's.
		bridge.BatchMaxEvents, bridge.BatchMaxBytes, bridge.BatchMaxAge, bridge.BatchTimerInterval = 0, 0, 0, 0
	}
	for _, err := range []error{qc.Validate(), runtimeError(rt.Validate()), prefixed("AMQP.Bridge", bridge.Validate())} {
		if err != nil {
			return Config{}, cfg.envNamed(err)
		}
	}
	return cfg, nil
}

// envNamed turns a *queue.ConfigError on a field a variable set into one on
// that variable, with the value as written (never a secret one).
func (c Config) envNamed(err error) error {
	var ce *queue.ConfigError
	if err == nil || len(c.env) == 0 || !errors.As(err, &ce) {
		return err
	}
	for _, v := range variables() {
		value, set := c.env[v.name]
		if !set || v.field == "" || v.field != ce.Name {
			continue
		}
		out := *ce
		out.Name = v.name
		if !v.secret {
			out.Value = value
		}
		out.Reason = strings.ReplaceAll(out.Reason, "AMQP.Bridge.URL", "AMQP_URL")
		return &out
	}
	return err
}

// parseQueueNames parses the comma-separated AMQP queue names of
// TRIBUTARY_DASHBOARD_AMQP_QUEUES.
func parseQueueNames(raw string) ([]string, error) {
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

// checkLogLevel checks a LogLevel; empty is the default.
func checkLogLevel(level string) error {
	var l slog.Level
	if level != "" && l.UnmarshalText([]byte(level)) != nil {
		return errors.New("want debug, info, warn or error")
	}
	return nil
}

// checkLogFormat checks a LogFormat; empty is the default.
func checkLogFormat(format string) error {
	if format != "" && format != "text" && format != "json" {
		return errors.New("want text or json")
	}
	return nil
}

// checkOTLPEndpoint checks an OTLP/HTTP endpoint URL; empty is none.
func checkOTLPEndpoint(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL such as http://127.0.0.1:4318")
	}
	return nil
}

const dashboardAMQPQueuesVar = "TRIBUTARY_DASHBOARD_AMQP_QUEUES"

// variable is one environment variable: its name and how its value (set,
// trimmed, not empty) goes into the Config.
type variable struct {
	name   string
	field  string // the Config field it sets, as Validate names it
	secret bool   // a URL that may carry a password: errors show it redacted
	set    func(c *Config, raw string) error
}

// variables lists every environment variable tributary reads. A new one is
// a line here and a row in the documented table (docs/configuration.md;
// TestREADMEConfigurationTables checks both ways).
func variables() []variable {
	return []variable{
		{name: "DATABASE_URL", field: "DatabaseURL", secret: true, set: func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
		{name: "TRIBUTARY_SCHEMA", field: "Schema", set: func(c *Config, v string) error { c.Schema = v; return nil }},
		{name: "OTEL_EXPORTER_OTLP_ENDPOINT", field: "Tracing.OTLPEndpoint", secret: true, set: func(c *Config, v string) error {
			c.Tracing.OTLPEndpoint = v
			return checkOTLPEndpoint(v)
		}},
		{name: "TRIBUTARY_SHUTDOWN_TIMEOUT", field: "Runtime.ShutdownTimeout", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.ShutdownTimeout }, time.Nanosecond, false)},
		{name: "TRIBUTARY_JOB_RETENTION_COMPLETED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.CompletedJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_JOB_RETENTION_CANCELLED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.CancelledJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_JOB_RETENTION_DISCARDED", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.DiscardedJobRetention }, time.Nanosecond, true)},
		{name: "TRIBUTARY_LIVENESS_TIMEOUT", field: "Runtime.LivenessTimeout", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.LivenessTimeout }, time.Nanosecond, false)},
		{name: "TRIBUTARY_FETCH_COOLDOWN", field: "Runtime.FetchCooldown", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.FetchCooldown }, time.Nanosecond, false)},
		{name: "TRIBUTARY_FETCH_POLL_INTERVAL", field: "Runtime.FetchPollInterval", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.FetchPollInterval }, time.Nanosecond, false)},
		{name: "TRIBUTARY_RESCUE_STUCK_AFTER", field: "Runtime.RescueStuckJobsAfter", set: durationInto(func(c *Config) *time.Duration { return &c.Runtime.RescueStuckJobsAfter }, time.Nanosecond, false)},
		{name: "AMQP_URL", field: "AMQP.Bridge.URL", secret: true, set: func(c *Config, v string) error { c.AMQP.Bridge.URL = v; return nil }},
		{name: "QUEUE_PREFIX", field: "AMQP.Bridge.QueuePrefix", set: func(c *Config, v string) error { c.AMQP.Bridge.QueuePrefix = v; return nil }},
		{name: "MAX_MESSAGE_RETRIES", field: "AMQP.Bridge.MaxMessageRetries", set: func(c *Config, v string) error {
			n, err := parseInt(v, 0, math.MaxInt32)
			// 0 is an explicit choice here, where the bridge's zero means its
			// default.
			c.AMQP.Bridge.MaxMessageRetries = cmp.Or(n, amqpbridge.NoRetries)
			return err
		}},
		{name: "RETRY_BASE_MS", field: "AMQP.Bridge.RetryBase", set: millisInto(func(c *Config) []*time.Duration { return []*time.Duration{&c.AMQP.Bridge.RetryBase} })},
		{name: "RETRY_MAX_MS", field: "AMQP.Bridge.RetryMax", set: millisInto(func(c *Config) []*time.Duration { return []*time.Duration{&c.AMQP.Bridge.RetryMax} })},
		{name: "S3_BATCH_MAX_EVENTS", field: "AMQP.Bridge.BatchMaxEvents", set: func(c *Config, v string) error {
			n, err := parseInt(v, 1, math.MaxInt32)
			c.Batch.Streams.Defaults.MaxEvents, c.AMQP.Bridge.BatchMaxEvents = n, n
			return err
		}},
		{name: "S3_BATCH_MAX_BYTES", field: "AMQP.Bridge.BatchMaxBytes", set: func(c *Config, v string) error {
			n, err := parseInt(v, 1, math.MaxInt)
			c.Batch.Streams.Defaults.MaxBytes, c.AMQP.Bridge.BatchMaxBytes = int64(n), n
			return err
		}},
		{name: "S3_BATCH_MAX_AGE_MS", field: "AMQP.Bridge.BatchMaxAge", set: millisInto(func(c *Config) []*time.Duration {
			return []*time.Duration{&c.Batch.Streams.Defaults.MaxAge, &c.AMQP.Bridge.BatchMaxAge}
		})},
		{name: "S3_BATCH_TIMER_INTERVAL_MS", field: "AMQP.Bridge.BatchTimerInterval", set: millisInto(func(c *Config) []*time.Duration {
			return []*time.Duration{&c.Batch.TimerInterval, &c.AMQP.Bridge.BatchTimerInterval}
		})},
		{name: "BATCH_SINK_URL", field: "Batch.SinkURL", secret: true, set: func(c *Config, v string) error {
			c.Batch.SinkURL = v
			return batch.CheckSinkURL(v)
		}},
		{name: "TRIBUTARY_HTTP_ADDR", field: "Dashboard.Addr", set: func(c *Config, v string) error {
			c.Dashboard.Addr = v
			if reason := dashboard.CheckAddr(v); reason != "" {
				return errors.New(reason)
			}
			return nil
		}},
		{name: "TRIBUTARY_DASHBOARD_TOKEN", set: func(c *Config, v string) error { c.Dashboard.Token = v; return nil }},
		{name: dashboardAMQPQueuesVar, field: "Dashboard.AMQPQueues", set: func(c *Config, v string) (err error) {
			c.Dashboard.AMQPQueues, err = parseQueueNames(v)
			return err
		}},
		{name: "TRIBUTARY_OUTBOX_EXCHANGE", field: "AMQP.OutboxExchange", set: func(c *Config, v string) error {
			if strings.ContainsAny(v, " \t/") {
				return errors.New("no spaces or slashes")
			}
			c.AMQP.OutboxExchange = v
			return nil
		}},
		{name: "TRIBUTARY_AMQP_BATCH_QUEUE", field: "AMQP.BatchQueue", set: func(c *Config, v string) (err error) {
			c.AMQP.BatchQueue, err = parseBatchQueue(v)
			return err
		}},
		{name: "LOG_LEVEL", field: "LogLevel", set: func(c *Config, v string) error {
			c.LogLevel = v
			return checkLogLevel(v)
		}},
		{name: "LOG_FORMAT", field: "LogFormat", set: func(c *Config, v string) error {
			c.LogFormat = v
			return checkLogFormat(v)
		}},
		retentionVariable("TRIBUTARY_OUTBOX_SENT_RETENTION", events.OutboxSentCleanup()),
		retentionVariable("TRIBUTARY_OUTBOX_FAILED_RETENTION", events.OutboxFailedCleanup()),
		retentionVariable("TRIBUTARY_EVENT_LANE_RETENTION", events.IdleLaneCleanup()),
		retentionVariable("TRIBUTARY_BATCH_OBJECT_RETENTION", batch.ObjectCleanup()),
		retentionVariable("TRIBUTARY_WORKFLOW_RETENTION", workflow.Cleanup()),
		{name: "TRIBUTARY_WORKFLOW_ARCHIVE", field: "Cleanup.ArchiveWorkflows", set: func(c *Config, v string) (err error) {
			c.Cleanup.ArchiveWorkflows, err = parseBool(v)
			return err
		}},
		{name: "TRIBUTARY_CLEANUP_SPEC", field: "Cleanup.Spec", set: func(c *Config, v string) error {
			if _, err := scheduler.ParseSpec(v, ""); err != nil {
				return err
			}
			c.Cleanup.Spec = v
			return nil
		}},
		{name: "TRIBUTARY_CLEANUP_BATCH_SIZE", field: "Cleanup.BatchSize", set: func(c *Config, v string) (err error) {
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

// parseBool parses true or false (also 1/0, t/f, in any case).
func parseBool(raw string) (bool, error) {
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
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
