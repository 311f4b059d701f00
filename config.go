package tributary

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// Defaults of Config's own fields. The features own the others (queue,
// events, workflow, scheduler, batch, amqpbridge, dashboard); each field
// names its default.
const (
	// QueueWorkersDefault is the concurrency of the "default" queue when
	// Config.Queues is empty.
	QueueWorkersDefault = queue.QueueMaxWorkersDefault

	// ConsumerQueueWorkersDefault is the concurrency of the event
	// consumers' queue ("events", events.QueueDefault) when Config.Queues
	// is empty, and of any other queue a consumer names.
	ConsumerQueueWorkersDefault = 50

	LogLevelDefault  = "info"
	LogFormatDefault = "text"
)

// Config declares what a process runs. The zero value is a process that
// works the "default" queue with 100 workers and the "events" queue with
// 50, and cleans tributary's tables hourly; everything else is added by its field. New validates it once;
// an error is a *queue.ConfigError naming the field and the value.
type Config struct {
	// DatabaseURL is where Open and NewPool connect (New itself takes a
	// pool).
	//
	// Defaults to queue.DatabaseURLDefault, a local server on
	// 127.0.0.1:5432.
	DatabaseURL string

	// Schema holds River's and tributary's tables.
	//
	// Defaults to "public".
	Schema string

	// Logger is the logger of the process and of every feature.
	//
	// Defaults to a logger on stderr at LogLevel in LogFormat when either
	// is set (ConfigFromEnv sets both), else slog.Default().
	Logger *slog.Logger

	// LogLevel (debug, info, warn or error) and LogFormat (text or json)
	// build the default Logger; see NewLogger.
	//
	// Default to empty: slog.Default() is the logger.
	LogLevel  string
	LogFormat string

	// Queues maps each queue this process works to its maximum concurrent
	// jobs.
	//
	// Defaults to {"default": 100, "events": 50}: plain jobs on "default"
	// (QueueWorkersDefault), event consumers on "events" (their own
	// default queue, events.QueueDefault; ConsumerQueueWorkersDefault), so
	// a burst of events never takes the slots of plain jobs. A consumer
	// that names another queue adds it with 50 workers. When Queues is set,
	// every consumer's queue must be in it.
	Queues map[string]int

	// Workers holds the workers of this process's job kinds. AddWorker adds
	// to it after New as well. Enqueue takes any kind, worked here or not:
	// the process that enqueues a kind need not be one that works it.
	//
	// Defaults to a new, empty river.Workers.
	Workers *river.Workers

	// Middleware wrap every job, inside the workflow coordinator's (which
	// is outermost, so it records the result River records).
	//
	// Defaults to none.
	Middleware []rivertype.Middleware

	// Runtime has the worker runtime's other settings: ShutdownTimeout,
	// LivenessTimeout, FetchCooldown, FetchPollInterval,
	// RescueStuckJobsAfter, the job retentions, JobTimeout, ID and
	// RiverConfigFunc, each defaulted by queue.RuntimeConfig. Its Schema,
	// Logger, Queues, Workers and Middleware must be left zero: they are
	// this Config's.
	//
	// Defaults to queue.RuntimeConfig's defaults, field by field.
	Runtime queue.RuntimeConfig

	// Consumers are the event consumers this process runs (events.NewConsumer
	// and events.On build them; On, after New, adds handlers and consumers
	// with the default configuration without them). Each consumer handles
	// an event type's events with the same aggregate id one at a time, in
	// emit order.
	//
	// Defaults to none: the process still forwards emitted events.
	Consumers []*events.Consumer

	// Events configures emitting (App.Emit) and forwarding.
	//
	// Defaults to emitting the event types Consumers subscribe to, a
	// NOTIFY at each commit that emitted, and a forwarder in every App that
	// starts.
	Events EventsConfig

	// Workflows are the named workflows this process may start by name with
	// JSON input (App.StartWorkflow), and that schedules start
	// (workflow.StartArgs as a schedule's Args: this process works those
	// jobs). The workflow coordinator runs in every App whatever this says:
	// it is what advances workflows.
	//
	// Defaults to none.
	Workflows *workflow.Registry

	// Coordinator has the workflow coordinator's settings (OutputMaxBytes,
	// RepairInterval); its Schema and Logger are this Config's.
	//
	// Defaults to workflow.CoordinatorConfig's (256 KiB, 30 seconds).
	Coordinator workflow.CoordinatorConfig

	// Schedules are cron schedules: each inserts its job on its spec, once
	// across all the processes that declare it. Their kinds need workers.
	//
	// Defaults to none.
	Schedules []scheduler.Schedule

	// Limits cap how many jobs run at once across every process: globally,
	// per queue, per kind or per partition key (docs/limits.md). The App
	// marks their jobs at insert and admits them while it runs; declare the
	// same limits in every process that enqueues or works their jobs. The
	// caps of Consumers (events.ConsumerConfig.MaxHandlers) are declared
	// with them, as limits named "consumer:" and the consumer's name.
	//
	// Defaults to none.
	Limits []limits.Limit

	// Cleanup configures the scheduled deletion of old rows of tributary's
	// tables.
	//
	// Defaults to on: CleanupTargets, hourly, with their own retentions.
	Cleanup CleanupConfig

	// Batch configures batch streams: staging (App.Stage) and, with a sink,
	// the flushes that write staged items out as objects.
	//
	// Defaults to staging with batch's thresholds and no flushes here.
	Batch BatchConfig

	// Inboxes are the inboxes whose jobs this process runs (inbox.Install).
	// A job of an inbox not listed waits for a process that lists it.
	//
	// Defaults to none.
	Inboxes []*inbox.Inbox

	// AMQP configures the RabbitMQ bridge.
	//
	// Defaults to off: on when AMQP.Bridge.URL is set.
	AMQP AMQPConfig

	// Dashboard serves the dashboard, /metrics and health checks from this
	// process.
	//
	// Defaults to off: on when Dashboard.Addr is set.
	Dashboard DashboardConfig

	// Tracing exports traces.
	//
	// Defaults to off: on when Tracing.OTLPEndpoint is set.
	Tracing TracingConfig

	// env holds the variables ConfigFromEnv read, by name, so an error on a
	// field they set names the variable.
	env map[string]string
}

// EventsConfig configures emitting and forwarding events.
type EventsConfig struct {
	// Types are event types this process emits besides those its
	// Consumers subscribe to (events.On, events.Handle), which App.Emit
	// accepts without being listed; App.Emit refuses any other.
	//
	// Defaults to none.
	Types []events.Definition

	// SourceService names this service on every event it emits; consumers
	// may skip their own service's events by kind.
	//
	// Defaults to empty.
	SourceService string

	// NoNotify leaves out the NOTIFY that wakes the forwarders when a
	// transaction that emitted commits (events.EmitterConfig.NoNotify):
	// forwarders then find new events at their poll interval
	// (Forwarder.PollInterval). For emitters whose commit rate makes the
	// NOTIFY a cost.
	//
	// Defaults to false: every commit that emitted notifies.
	NoNotify bool

	// MaxPayloadBytes bounds the JSON of one payload.
	//
	// Defaults to events.MaxPayloadBytesDefault (1 MiB).
	MaxPayloadBytes int

	// Forwarder has the outbox forwarder's settings. Its Schema, Logger and
	// ID are this process's; the in-database bus is always its first
	// publisher and the AMQP outbound bridge (AMQPConfig.OutboxExchange) is
	// added after Publishers.
	//
	// Defaults to events.ForwarderConfig's defaults, field by field.
	Forwarder events.ForwarderConfig

	// NoForwarder leaves the forwarder out of this process (one that only
	// consumes, or emits for other processes to forward).
	//
	// Defaults to false: every App that starts forwards.
	NoForwarder bool
}

// CleanupConfig configures the clean-up schedules: one cron schedule per
// target table, run once across the processes, deleting rows older than the
// target's retention in bounded batches.
type CleanupConfig struct {
	// Disabled turns the clean-up off in this process.
	//
	// Defaults to false: the targets of CleanupTargets are cleaned.
	Disabled bool

	// Targets are tables of the application's own to clean as well.
	//
	// Defaults to none.
	Targets []queue.CleanupTarget

	// Retentions overrides the retention of targets by name ("outbox_sent",
	// "workflows", ...); -1 keeps a target's rows.
	//
	// Defaults to each target's own retention: outbox sent 7 days, outbox
	// failed 30 days, idle event lanes 7 days, batch objects 30 days,
	// finished workflows 30 days.
	Retentions map[string]time.Duration

	// Spec is when the clean-up jobs run.
	//
	// Defaults to scheduler.CleanupSpecDefault ("@every 1h").
	Spec string

	// BatchSize is the number of rows one delete statement removes.
	//
	// Defaults to scheduler.CleanupBatchSizeDefault (5000).
	BatchSize int

	// Queue the clean-up jobs go to.
	//
	// Defaults to "default".
	Queue string

	// ArchiveWorkflows writes the finished workflows the "workflows"
	// target deletes (each one's row, tasks with outputs, step records,
	// signals and attributes, one JSON line) into the batch sink before
	// deleting them: one JSONL.gz object per clean-up batch under the
	// stream workflow.ArchiveStream ("tributary.workflows"), recorded in
	// the transaction of the delete (workflow.ArchiveCleanup). The process
	// that runs the clean-up writes the object, so it needs Batch.Sink or
	// Batch.SinkURL; give every process that runs clean-up jobs the same
	// setting. `tributary workflows archived` lists the objects.
	// TRIBUTARY_WORKFLOW_ARCHIVE sets it.
	//
	// Defaults to false: retention deletes finished workflows without a
	// copy.
	ArchiveWorkflows bool
}

// BatchConfig configures batch streams.
type BatchConfig struct {
	// Streams has the thresholds of every stream (items, bytes, age).
	//
	// Defaults to batch.StreamConfig's defaults for every stream.
	Streams batch.Config

	// Sink receives the flushed objects; with it (or SinkURL) this process
	// runs the flushes.
	//
	// Defaults to nil: this process stages items but flushes none.
	Sink batch.Sink

	// SinkURL is opened as the sink when Sink is nil (batch.OpenSink:
	// file://, s3://, mem://).
	//
	// Defaults to empty: no sink.
	SinkURL string

	// TimerInterval is how often the age timer measures the streams.
	//
	// Defaults to batch.TimerIntervalDefault (30 seconds).
	TimerInterval time.Duration
}

// AMQPConfig configures the RabbitMQ bridge.
type AMQPConfig struct {
	// Bridge is the broker and the bridge-wide settings (queue prefix,
	// retries, batch thresholds). With Bridge.URL set the process runs a
	// publisher (connected on first use) and what the fields below add.
	//
	// Defaults to off (Bridge.URL empty).
	Bridge amqpbridge.Config

	// Consumers read AMQP queues with a handler each.
	//
	// Defaults to none.
	Consumers []amqpbridge.ConsumerConfig

	// Inbound read AMQP queues into the database, a batch per transaction;
	// an InboundConfig with no DB uses the App's pool.
	//
	// Defaults to none.
	Inbound []amqpbridge.InboundConfig

	// OutboxExchange, when set, is an exchange the outbox forwarder
	// publishes every event to, besides the in-database bus.
	//
	// Defaults to empty: none.
	OutboxExchange string

	// BatchQueue, when set, is a queue whose messages are staged into a
	// batch stream (acked after the staging commits).
	//
	// Defaults to none.
	BatchQueue BatchQueue
}

// BatchQueue is an AMQP queue read into a batch stream.
type BatchQueue struct {
	// Queue is the logical queue name; the bridge adds the queue prefix.
	Queue string

	// Stream is the batch stream its messages are staged into.
	//
	// Defaults to Queue.
	Stream string
}

// String returns q as TRIBUTARY_AMQP_BATCH_QUEUE says it: QUEUE, or
// QUEUE:STREAM.
func (q BatchQueue) String() string {
	if q.Stream == "" || q.Stream == q.Queue {
		return q.Queue
	}
	return q.Queue + ":" + q.Stream
}

// DashboardConfig configures the dashboard served from the process.
type DashboardConfig struct {
	// Addr is where it listens.
	//
	// Defaults to empty: no dashboard in this process.
	Addr string

	// Token enables the dashboard's actions (retry, cancel, replay, ...).
	//
	// Defaults to empty: read-only.
	Token string

	// AMQPQueues are the AMQP queues the AMQP page shows and may replay
	// (needs AMQP.Bridge.URL).
	//
	// Defaults to none.
	AMQPQueues []string

	// Collectors are served on /metrics besides the counters of every
	// feature the App runs, which New registers itself.
	//
	// Defaults to none.
	Collectors []prometheus.Collector
}

// TracingConfig configures trace export.
type TracingConfig struct {
	// OTLPEndpoint is the base http:// or https:// URL of an OTLP/HTTP
	// collector, as OTEL_EXPORTER_OTLP_ENDPOINT is: traces go to its
	// /v1/traces.
	// When set, Start installs a tracer provider exporting to it as
	// OpenTelemetry's global one (River's middleware, the events and the
	// AMQP bridge trace through the global provider) and Stop flushes it.
	// The exporter reads its other OTEL_EXPORTER_OTLP_* settings itself.
	//
	// Defaults to empty: spans are not exported.
	OTLPEndpoint string
}

// CleanupTargets returns tributary's own clean-up targets with their default
// retentions: sent and failed outbox rows, idle event lanes, batch objects
// and finished workflows.
func CleanupTargets() []queue.CleanupTarget {
	return []queue.CleanupTarget{
		events.OutboxSentCleanup(),
		events.OutboxFailedCleanup(),
		events.IdleLaneCleanup(),
		batch.ObjectCleanup(),
		workflow.Cleanup(),
	}
}

// NewPool connects to cfg.DatabaseURL (queue.NewPool: a pool of 20
// connections unless the URL sets pool_max_conns) and checks that the
// database answers.
func NewPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	return queue.NewPool(ctx, queue.Config{DatabaseURL: cfg.DatabaseURL, Schema: cfg.Schema})
}

// NewLogger returns the slog logger LogLevel and LogFormat ask for (info and
// text when empty), writing to w.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cmp.Or(c.LogLevel, LogLevelDefault))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// DatabaseHost returns the host and port of DatabaseURL, never its
// password.
func (c Config) DatabaseHost() string {
	return queue.Config{DatabaseURL: c.DatabaseURL}.WithDefaults().DatabaseHost()
}

// Validate checks c as New would use it, defaults applied, and returns a
// *queue.ConfigError naming the first bad field (with its path, such as
// "Runtime.LivenessTimeout") and its value.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return c.envNamed(err)
}

// withDefaults returns c with every default filled, validated.
func (c Config) withDefaults() (Config, error) {
	qc := queue.Config{DatabaseURL: c.DatabaseURL, Schema: c.Schema}.WithDefaults()
	if err := qc.Validate(); err != nil {
		return c, err
	}
	c.DatabaseURL, c.Schema = qc.DatabaseURL, qc.Schema
	if c.Logger == nil {
		if c.LogLevel != "" || c.LogFormat != "" {
			c.Logger = c.NewLogger(os.Stderr)
		} else {
			c.Logger = slog.Default()
		}
	}
	if err := checkLogLevel(c.LogLevel); err != nil {
		return c, &queue.ConfigError{Name: "LogLevel", Value: c.LogLevel, Reason: err.Error()}
	}
	if err := checkLogFormat(c.LogFormat); err != nil {
		return c, &queue.ConfigError{Name: "LogFormat", Value: c.LogFormat, Reason: err.Error()}
	}

	rt := c.Runtime
	switch {
	case rt.Schema != "":
		return c, &queue.ConfigError{Name: "Runtime.Schema", Value: rt.Schema, Reason: "set Config.Schema instead"}
	case rt.Logger != nil:
		return c, &queue.ConfigError{Name: "Runtime.Logger", Reason: "set Config.Logger instead"}
	case len(rt.Queues) > 0:
		return c, &queue.ConfigError{Name: "Runtime.Queues", Value: fmt.Sprint(rt.Queues), Reason: "set Config.Queues instead"}
	case rt.Workers != nil:
		return c, &queue.ConfigError{Name: "Runtime.Workers", Reason: "set Config.Workers instead"}
	case len(rt.Middleware) > 0:
		return c, &queue.ConfigError{Name: "Runtime.Middleware", Reason: "set Config.Middleware instead"}
	}

	names := map[string]bool{}
	for i, cons := range c.Consumers {
		if cons == nil {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Consumers[%d]", i), Reason: "nil consumer"}
		}
		if names[cons.Name()] {
			return c, &queue.ConfigError{Name: "Consumers", Value: cons.Name(), Reason: "consumer given twice"}
		}
		names[cons.Name()] = true
	}
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{river.QueueDefault: QueueWorkersDefault, events.QueueDefault: ConsumerQueueWorkersDefault}
		for _, cons := range c.Consumers {
			if q := cons.Config().Queue; c.Queues[q] == 0 {
				c.Queues[q] = ConsumerQueueWorkersDefault
			}
		}
	} else {
		c.Queues = maps.Clone(c.Queues)
		for _, cons := range c.Consumers {
			if q := cons.Config().Queue; c.Queues[q] == 0 {
				return c, &queue.ConfigError{Name: "Queues", Value: queuesString(c.Queues),
					Reason: fmt.Sprintf("consumer %s dispatches on queue %q, which this process does not work: add it", cons.Name(), q)}
			}
		}
	}
	rt.Schema, rt.Logger, rt.Queues, rt.Workers = c.Schema, c.Logger, c.Queues, c.Workers
	if err := rt.Validate(); err != nil {
		return c, runtimeError(err)
	}

	if c.Events.MaxPayloadBytes < 0 {
		return c, &queue.ConfigError{Name: "Events.MaxPayloadBytes", Value: fmt.Sprint(c.Events.MaxPayloadBytes), Reason: "must not be negative"}
	}
	if _, err := c.eventRegistry(); err != nil {
		return c, &queue.ConfigError{Name: "Events.Types", Reason: err.Error()}
	}

	limitNames := map[string]bool{}
	for i, l := range c.Limits {
		if err := l.Validate(); err != nil {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Limits[%d]", i), Value: l.Name, Reason: err.Error()}
		}
		if limitNames[l.Name] {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Limits[%d].Name", i), Value: l.Name, Reason: "limit given twice"}
		}
		limitNames[l.Name] = true
	}
	for i, cons := range c.Consumers {
		if l, ok := cons.Limit(); ok && limitNames[l.Name] {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Consumers[%d].MaxHandlers", i), Value: l.Name,
				Reason: "the consumer's cap is a limit of this name, which Limits declares too: rename that limit"}
		}
	}

	if !c.Cleanup.Disabled {
		if _, err := scheduler.CleanupSchedules(c.cleanupConfig()); err != nil {
			return c, &queue.ConfigError{Name: "Cleanup", Reason: err.Error()}
		}
	}
	seen := map[string]bool{}
	for i, s := range c.Schedules {
		if seen[s.Name] {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Schedules[%d].Name", i), Value: s.Name, Reason: "schedule given twice"}
		}
		seen[s.Name] = true
		if s.Args == nil {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Schedules[%d].Args", i), Value: s.Name, Reason: "required"}
		}
		if _, err := scheduler.ParseSpec(s.Spec, s.Timezone); err != nil {
			return c, &queue.ConfigError{Name: fmt.Sprintf("Schedules[%d].Spec", i), Value: s.Spec, Reason: err.Error()}
		}
	}

	if err := c.Batch.Streams.Validate(); err != nil {
		return c, prefixed("Batch.Streams", err)
	}
	if c.Batch.Sink == nil && c.Batch.SinkURL != "" {
		if err := batch.CheckSinkURL(c.Batch.SinkURL); err != nil {
			return c, &queue.ConfigError{Name: "Batch.SinkURL", Value: queue.RedactURL(c.Batch.SinkURL), Reason: err.Error()}
		}
	}
	if c.Cleanup.ArchiveWorkflows && !c.Cleanup.Disabled && c.Batch.Sink == nil && c.Batch.SinkURL == "" {
		return c, &queue.ConfigError{Name: "Cleanup.ArchiveWorkflows", Value: "true",
			Reason: "needs Batch.Sink or Batch.SinkURL: the clean-up writes the archive objects itself"}
	}
	if c.Batch.TimerInterval < 0 {
		return c, &queue.ConfigError{Name: "Batch.TimerInterval", Value: c.Batch.TimerInterval.String(), Reason: "must not be negative"}
	}

	if err := c.checkAMQP(); err != nil {
		return c, err
	}
	if c.Dashboard.Addr != "" {
		if reason := dashboard.CheckAddr(c.Dashboard.Addr); reason != "" {
			return c, &queue.ConfigError{Name: "Dashboard.Addr", Value: c.Dashboard.Addr, Reason: reason}
		}
	}
	if len(c.Dashboard.AMQPQueues) > 0 && c.AMQP.Bridge.URL == "" {
		return c, &queue.ConfigError{Name: "Dashboard.AMQPQueues", Value: strings.Join(c.Dashboard.AMQPQueues, ","), Reason: "needs AMQP.Bridge.URL"}
	}
	if err := checkOTLPEndpoint(c.Tracing.OTLPEndpoint); err != nil {
		return c, &queue.ConfigError{Name: "Tracing.OTLPEndpoint", Value: queue.RedactURL(c.Tracing.OTLPEndpoint), Reason: err.Error()}
	}
	return c, nil
}

// eventRegistry returns the event types App.Emit accepts: Events.Types,
// then those the consumers subscribe to that Types does not name.
func (c Config) eventRegistry() (*events.Registry, error) {
	defs := slices.Clone(c.Events.Types)
	named := map[string]bool{}
	for _, d := range defs {
		named[d.Name()] = true
	}
	for _, cons := range c.Consumers {
		if cons == nil {
			continue
		}
		for _, d := range cons.Definitions() {
			if !named[d.Name()] {
				named[d.Name()] = true
				defs = append(defs, d)
			}
		}
	}
	return events.NewRegistry(defs...)
}

// checkAMQP checks the bridge's settings: the bridge's own rules when it is
// on, and that nothing needs it when it is off.
func (c Config) checkAMQP() error {
	a := c.AMQP
	if a.Bridge.URL == "" {
		switch {
		case a.OutboxExchange != "":
			return &queue.ConfigError{Name: "AMQP.OutboxExchange", Value: a.OutboxExchange, Reason: "needs AMQP.Bridge.URL"}
		case a.BatchQueue.Queue != "":
			return &queue.ConfigError{Name: "AMQP.BatchQueue", Value: a.BatchQueue.String(), Reason: "needs AMQP.Bridge.URL"}
		case len(a.Consumers) > 0:
			return &queue.ConfigError{Name: "AMQP.Consumers", Value: a.Consumers[0].Queue, Reason: "needs AMQP.Bridge.URL"}
		case len(a.Inbound) > 0:
			return &queue.ConfigError{Name: "AMQP.Inbound", Value: a.Inbound[0].Queue, Reason: "needs AMQP.Bridge.URL"}
		}
		return nil
	}
	if err := a.Bridge.Validate(); err != nil {
		return prefixed("AMQP.Bridge", err)
	}
	if strings.ContainsAny(a.OutboxExchange, " \t/") {
		return &queue.ConfigError{Name: "AMQP.OutboxExchange", Value: a.OutboxExchange, Reason: "no spaces or slashes"}
	}
	if q := a.BatchQueue; q.Queue != "" {
		if _, err := parseBatchQueue(q.String()); err != nil {
			return &queue.ConfigError{Name: "AMQP.BatchQueue", Value: q.String(), Reason: err.Error()}
		}
	}
	return nil
}

// cleanupConfig is the scheduler's clean-up configuration for c.
func (c Config) cleanupConfig() scheduler.CleanupConfig {
	targets := CleanupTargets()
	if len(c.Inboxes) > 0 {
		targets = append(targets, inbox.OrphanCleanup())
	}
	return scheduler.CleanupConfig{
		Targets:    append(targets, c.Cleanup.Targets...),
		Retentions: c.Cleanup.Retentions,
		Spec:       c.Cleanup.Spec,
		BatchSize:  c.Cleanup.BatchSize,
		Queue:      c.Cleanup.Queue,
	}
}

// prefixed returns err with the field path prefix before the name of the
// *queue.ConfigError it wraps, or as a *queue.ConfigError on prefix.
func prefixed(prefix string, err error) error {
	var ce *queue.ConfigError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ce):
		return &queue.ConfigError{Name: prefix, Reason: err.Error()}
	case prefix == "":
		return err
	}
	out := *ce
	out.Name = prefix + "." + ce.Name
	return &out
}

// runtimeError names a field of queue.RuntimeConfig as Config does: Schema
// and Queues are Config's own, the others Runtime's.
func runtimeError(err error) error {
	var ce *queue.ConfigError
	if errors.As(err, &ce) && (ce.Name == "Schema" || ce.Name == "Queues") {
		return err
	}
	return prefixed("Runtime", err)
}

// queuesString returns queues as "a=1,b=2", sorted.
func queuesString(queues map[string]int) string {
	parts := make([]string, 0, len(queues))
	for name, n := range queues {
		parts = append(parts, fmt.Sprintf("%s=%d", name, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
