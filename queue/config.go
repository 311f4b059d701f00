package queue

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/migrations"
)

// Defaults for Config. Each is also documented on its field.
const (
	DatabaseURLDefault        = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	SchemaDefault             = "public"
	MaxMessageRetriesDefault  = 5
	RetryBaseDefault          = 4 * time.Second
	RetryMaxDefault           = 60 * time.Second
	BatchMaxEventsDefault     = 10000
	BatchMaxBytesDefault      = 10 << 20
	BatchMaxAgeDefault        = 10 * time.Minute
	BatchTimerIntervalDefault = 30 * time.Second
	BatchSinkURLDefault       = "file://./.tributary/batches"
	HTTPAddrDefault           = "127.0.0.1:8080"
	ShutdownTimeoutDefault    = 30 * time.Second
	LogLevelDefault           = "info"
	LogFormatDefault          = "text"
)

// Config is tributary's configuration. ConfigFromEnv reads it from the
// environment (the variable names are in DESIGN.md and the README); zero
// fields take the documented defaults in WithDefaults.
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL).
	//
	// Defaults to DatabaseURLDefault, a local server on 127.0.0.1:5432.
	DatabaseURL string

	// Schema holds River's and tributary's tables (TRIBUTARY_SCHEMA).
	//
	// Defaults to "public".
	Schema string

	// AMQPURL is the RabbitMQ URL (AMQP_URL). Empty turns the bridge off.
	AMQPURL string

	// QueuePrefix prefixes AMQP queue names as "{prefix}/{name}"
	// (QUEUE_PREFIX). Defaults to empty: no prefix.
	QueuePrefix string

	// MaxMessageRetries is how often an AMQP message is retried before it goes
	// to "{name}.failed" (MAX_MESSAGE_RETRIES). Defaults to 5; 0 is allowed
	// when set explicitly through the environment.
	MaxMessageRetries int

	// RetryBase and RetryMax bound the AMQP retry backoff
	// min(RetryBase*2^n, RetryMax) (RETRY_BASE_MS, RETRY_MAX_MS).
	//
	// Default to 4 s and 60 s.
	RetryBase time.Duration
	RetryMax  time.Duration

	// BatchMaxEvents, BatchMaxBytes and BatchMaxAge are a batch stream's flush
	// thresholds; BatchTimerInterval is how often the age is checked
	// (S3_BATCH_MAX_EVENTS, S3_BATCH_MAX_BYTES, S3_BATCH_MAX_AGE_MS,
	// S3_BATCH_TIMER_INTERVAL_MS).
	//
	// Default to 10000 items, 10 MiB, 10 minutes and 30 seconds.
	BatchMaxEvents     int
	BatchMaxBytes      int64
	BatchMaxAge        time.Duration
	BatchTimerInterval time.Duration

	// BatchSinkURL is where batch objects are written (BATCH_SINK_URL).
	//
	// Defaults to file://./.tributary/batches.
	BatchSinkURL string

	// HTTPAddr is the dashboard and metrics address (TRIBUTARY_HTTP_ADDR).
	//
	// Defaults to 127.0.0.1:8080.
	HTTPAddr string

	// DashboardToken enables dashboard actions with a bearer token
	// (TRIBUTARY_DASHBOARD_TOKEN). Empty makes the dashboard read-only.
	DashboardToken string

	// ShutdownTimeout is how long running jobs get to finish after a stop
	// signal before they are cancelled and left to run again later
	// (TRIBUTARY_SHUTDOWN_TIMEOUT, a Go duration).
	//
	// Defaults to 30 seconds.
	ShutdownTimeout time.Duration

	// CompletedJobRetention, CancelledJobRetention and DiscardedJobRetention
	// are how long River keeps finalized jobs before its cleaner deletes
	// them (TRIBUTARY_JOB_RETENTION_COMPLETED, _CANCELLED, _DISCARDED: a Go
	// duration, or "forever"). Zero means River's defaults (24 h, 24 h,
	// 7 days); -1 keeps them forever.
	CompletedJobRetention time.Duration
	CancelledJobRetention time.Duration
	DiscardedJobRetention time.Duration

	// RescueStuckJobsAfter is how long a job may stay running before River
	// assumes its process died and makes it available again
	// (TRIBUTARY_RESCUE_STUCK_AFTER, a Go duration, at least River's job
	// timeout of 1 minute). Zero means River's default (1 hour).
	RescueStuckJobsAfter time.Duration

	// LivenessTimeout is how old a worker process's heartbeat may get before
	// the other processes take it for dead and make its running jobs
	// available again (TRIBUTARY_LIVENESS_TIMEOUT, a Go duration of at least
	// 1s). Zero means LivenessTimeoutDefault (30 seconds).
	LivenessTimeout time.Duration

	// LogLevel is debug, info, warn or error (LOG_LEVEL). Defaults to info.
	LogLevel string

	// LogFormat is text or json (LOG_FORMAT). Defaults to text.
	LogFormat string

	// maxMessageRetriesSet records an explicit MAX_MESSAGE_RETRIES=0.
	maxMessageRetriesSet bool
}

// ConfigError is a configuration value that cannot be used. Its message
// names the variable and the bad value; passwords are never part of it.
type ConfigError struct {
	Name   string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Name, e.Value, e.Reason)
}

// ConfigFromEnv reads the configuration from the process environment.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.LookupEnv) }

// ConfigFromLookup reads the configuration through lookup, which has the
// shape of os.LookupEnv. The result has defaults applied and is validated.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	var cfg Config
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	cfg.DatabaseURL = get("DATABASE_URL")
	cfg.Schema = get("TRIBUTARY_SCHEMA")
	cfg.AMQPURL = get("AMQP_URL")
	cfg.QueuePrefix = get("QUEUE_PREFIX")
	cfg.BatchSinkURL = get("BATCH_SINK_URL")
	cfg.HTTPAddr = get("TRIBUTARY_HTTP_ADDR")
	cfg.DashboardToken = get("TRIBUTARY_DASHBOARD_TOKEN")
	cfg.LogLevel = get("LOG_LEVEL")
	cfg.LogFormat = get("LOG_FORMAT")

	var err error
	intVar := func(name string, dst *int, min int) {
		raw := get(name)
		if raw == "" || err != nil {
			return
		}
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < min {
			err = &ConfigError{Name: name, Value: raw, Reason: fmt.Sprintf("want an integer >= %d", min)}
			return
		}
		*dst = n
	}
	msVar := func(name string, dst *time.Duration) {
		var ms int
		intVar(name, &ms, 1)
		if ms > 0 {
			*dst = time.Duration(ms) * time.Millisecond
		}
	}
	if raw := get("MAX_MESSAGE_RETRIES"); raw != "" {
		intVar("MAX_MESSAGE_RETRIES", &cfg.MaxMessageRetries, 0)
		cfg.maxMessageRetriesSet = true
	}
	msVar("RETRY_BASE_MS", &cfg.RetryBase)
	msVar("RETRY_MAX_MS", &cfg.RetryMax)
	intVar("S3_BATCH_MAX_EVENTS", &cfg.BatchMaxEvents, 1)
	var maxBytes int
	intVar("S3_BATCH_MAX_BYTES", &maxBytes, 1)
	cfg.BatchMaxBytes = int64(maxBytes)
	msVar("S3_BATCH_MAX_AGE_MS", &cfg.BatchMaxAge)
	msVar("S3_BATCH_TIMER_INTERVAL_MS", &cfg.BatchTimerInterval)
	durationVar := func(name string, dst *time.Duration, allowForever bool) {
		raw := get(name)
		if raw == "" || err != nil {
			return
		}
		if allowForever && (raw == "forever" || raw == "-1") {
			*dst = -1
			return
		}
		d, perr := time.ParseDuration(raw)
		if perr != nil || d <= 0 {
			reason := "want a positive Go duration such as 72h"
			if allowForever {
				reason += ", or forever"
			}
			err = &ConfigError{Name: name, Value: raw, Reason: reason}
			return
		}
		*dst = d
	}
	durationVar("TRIBUTARY_JOB_RETENTION_COMPLETED", &cfg.CompletedJobRetention, true)
	durationVar("TRIBUTARY_JOB_RETENTION_CANCELLED", &cfg.CancelledJobRetention, true)
	durationVar("TRIBUTARY_JOB_RETENTION_DISCARDED", &cfg.DiscardedJobRetention, true)
	durationVar("TRIBUTARY_RESCUE_STUCK_AFTER", &cfg.RescueStuckJobsAfter, false)
	durationVar("TRIBUTARY_SHUTDOWN_TIMEOUT", &cfg.ShutdownTimeout, false)
	durationVar("TRIBUTARY_LIVENESS_TIMEOUT", &cfg.LivenessTimeout, false)
	if err != nil {
		return Config{}, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// WithDefaults returns a copy of cfg with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DatabaseURLDefault)
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	if c.MaxMessageRetries == 0 && !c.maxMessageRetriesSet {
		c.MaxMessageRetries = MaxMessageRetriesDefault
	}
	c.RetryBase = cmp.Or(c.RetryBase, RetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.BatchMaxEvents = cmp.Or(c.BatchMaxEvents, BatchMaxEventsDefault)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, int64(BatchMaxBytesDefault))
	c.BatchMaxAge = cmp.Or(c.BatchMaxAge, BatchMaxAgeDefault)
	c.BatchTimerInterval = cmp.Or(c.BatchTimerInterval, BatchTimerIntervalDefault)
	c.BatchSinkURL = cmp.Or(c.BatchSinkURL, BatchSinkURLDefault)
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.LivenessTimeout = cmp.Or(c.LivenessTimeout, LivenessTimeoutDefault)
	c.LogLevel = cmp.Or(c.LogLevel, LogLevelDefault)
	c.LogFormat = cmp.Or(c.LogFormat, LogFormatDefault)
	return c
}

// Validate checks every field and returns a *ConfigError for the first bad
// one.
func (c Config) Validate() error {
	if _, err := pgx.ParseConfig(c.DatabaseURL); err != nil {
		return &ConfigError{Name: "DATABASE_URL", Value: RedactURL(c.DatabaseURL), Reason: "not a valid Postgres connection string"}
	}
	if err := migrations.ValidateSchemaName(c.Schema); err != nil {
		return &ConfigError{Name: "TRIBUTARY_SCHEMA", Value: c.Schema, Reason: "use letters, digits and underscores, starting with a letter or underscore"}
	}
	if c.AMQPURL != "" {
		u, err := url.Parse(c.AMQPURL)
		if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			return &ConfigError{Name: "AMQP_URL", Value: RedactURL(c.AMQPURL), Reason: "want amqp://user:pass@host:port/vhost"}
		}
	}
	if strings.ContainsAny(c.QueuePrefix, " \t\n") {
		return &ConfigError{Name: "QUEUE_PREFIX", Value: c.QueuePrefix, Reason: "must not contain white space"}
	}
	if c.RetryMax < c.RetryBase {
		return &ConfigError{Name: "RETRY_MAX_MS", Value: strconv.FormatInt(c.RetryMax.Milliseconds(), 10), Reason: "must not be smaller than RETRY_BASE_MS"}
	}
	if u, err := url.Parse(c.BatchSinkURL); err != nil || (u.Scheme != "file" && u.Scheme != "s3" && u.Scheme != "mem") {
		return &ConfigError{Name: "BATCH_SINK_URL", Value: RedactURL(c.BatchSinkURL), Reason: "want file://PATH or s3://BUCKET?endpoint=...&region=..."}
	}
	if c.RescueStuckJobsAfter > 0 && c.RescueStuckJobsAfter < river.JobTimeoutDefault {
		// River refuses this too, but only once the worker has connected, and
		// in terms of its own fields; the job timeout is River's default here
		// because the environment does not set one.
		return &ConfigError{Name: "TRIBUTARY_RESCUE_STUCK_AFTER", Value: c.RescueStuckJobsAfter.String(),
			Reason: fmt.Sprintf("must not be less than the job timeout (River's JobTimeout, %s), or River would rescue jobs still running within their timeout", river.JobTimeoutDefault)}
	}
	if c.LivenessTimeout < LivenessTimeoutMin {
		return &ConfigError{Name: "TRIBUTARY_LIVENESS_TIMEOUT", Value: c.LivenessTimeout.String(), Reason: "want a Go duration of at least " + LivenessTimeoutMin.String()}
	}
	if reason := CheckListenAddr(c.HTTPAddr); reason != "" {
		return &ConfigError{Name: "TRIBUTARY_HTTP_ADDR", Value: c.HTTPAddr, Reason: reason}
	}
	if _, err := parseLogLevel(c.LogLevel); err != nil {
		return &ConfigError{Name: "LOG_LEVEL", Value: c.LogLevel, Reason: "want debug, info, warn or error"}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return &ConfigError{Name: "LOG_FORMAT", Value: c.LogFormat, Reason: "want text or json"}
	}
	return nil
}

// CheckListenAddr returns why addr cannot be a TCP listen address, or ""
// when it can. It only looks at the form (HOST:PORT, PORT a number or a
// service name), so it never waits on DNS; an address that is well formed
// but unusable (in use, not local) fails when the server starts.
func CheckListenAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want HOST:PORT such as 127.0.0.1:8080"
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("port %q is not a port number", port)
	}
	return ""
}

// DatabaseHost returns host:port of the database for messages, without user
// or password.
func (c Config) DatabaseHost() string {
	pc, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return "(unparsable DATABASE_URL)"
	}
	return fmt.Sprintf("%s:%d", pc.Host, pc.Port)
}

// RedactURL replaces the password in a URL-shaped string with "xxxxx" so
// the string can be logged. Strings that do not parse as a URL are replaced
// wholesale when they look like they may carry a password.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if strings.Contains(raw, "@") || strings.Contains(strings.ToLower(raw), "password") {
			return "(redacted)"
		}
		return raw
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// NewLogger builds the slog logger the configuration asks for, writing to w.
func (c Config) NewLogger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	level, err := parseLogLevel(c.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
