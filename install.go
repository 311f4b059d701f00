package tributary

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/batch/amqpbatch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// installation is what the installers share while New builds the App.
type installation struct {
	app *App

	// collectors are the features' Prometheus collectors, which the
	// dashboard installer, last, serves on /metrics.
	collectors []prometheus.Collector

	// outboxPublishers are the forwarder's destinations besides the
	// in-database bus (the AMQP outbound bridge).
	outboxPublishers []outbox.Publisher

	// limiter holds Config.Limits and admits workflow concurrency keys.
	limiter *limits.Limiter

	// ampqCollector counts the AMQP bridge's publisher and consumers.
	amqpCollector *amqpbridge.Collector

	// sink is Batch.Sink, or the sink Batch.SinkURL names, opened once for
	// the flushes and the workflow archive; nil without either.
	sink batch.Sink
}

// installer registers a feature's workers and adds its services to the
// runtime.
type installer struct {
	name    string
	install func(in *installation) error
}

// installers lists, in start order, what an App runs besides River. The
// runtime starts services in the order they were added and stops them in
// reverse, so each feature starts after what it feeds and stops before it.
func installers() []installer {
	return []installer{
		{name: "limits", install: installLimits},
		{name: "workflows", install: installWorkflows},
		{name: "scheduler", install: installScheduler},
		// Before the AMQP batch queue, which stages into it: the flushes
		// start first and stop last.
		{name: "batch flushes", install: installBatch},
		// The inbox workers, also with no inbox: a job of an inbox on a
		// queue this process works waits (snoozed) for the inbox's own
		// process instead of failing here as a job of an unknown kind.
		{name: "inbox", install: func(in *installation) error { return inbox.Install(in.app.rt, in.app.cfg.Inboxes...) }},
		// After the flushes and before the events: the inbound bridges and
		// the batch queue stop before the database work they feed, and the
		// publisher starts before the forwarder that uses it and stops after
		// it.
		{name: "AMQP bridge", install: installAMQP},
		{name: "events", install: installEvents},
		{name: "dashboard", install: installDashboard}, // last: it registers the others' collectors
	}
}

// install builds the runtime and runs the installers.
func (a *App) install() error {
	cfg := a.cfg
	// The coordinator's middleware wraps every job (it records workflow
	// task outcomes), so it exists before the runtime does, and it is the
	// outermost, so the outcome it records is the one River records.
	coord, err := workflow.NewCoordinator(a.pool, workflow.CoordinatorConfig{
		Schema: cfg.Schema, Logger: cfg.Logger,
		OutputMaxBytes: cfg.Coordinator.OutputMaxBytes, RepairInterval: cfg.Coordinator.RepairInterval,
	})
	if err != nil {
		return &queue.ConfigError{Name: "Coordinator", Reason: err.Error()}
	}
	rcfg := cfg.Runtime
	rcfg.Schema, rcfg.Logger, rcfg.Queues, rcfg.Workers = cfg.Schema, cfg.Logger, cfg.Queues, cfg.Workers
	rcfg.Middleware = append([]rivertype.Middleware{coord.Middleware()}, cfg.Middleware...)
	// The limits' middleware marks limited jobs at insert and completes
	// them at once when they succeed (docs/decisions/0030-flow-control.md).
	// A capped consumer's limit (events.ConsumerConfig.MaxHandlers) is
	// declared with them, so that this process's admitter runs its jobs.
	// The admitter runs in every App, limits declared or not: workflow
	// concurrency keys are limits too, and it applies their overrides
	// (decision 0035); the middleware, which turns off EnqueueManyTx's
	// COPY, only with declared limits.
	ls := cfg.allLimits()
	lim, err := limits.New(limits.Config{Limits: ls, Schema: cfg.Schema, Logger: cfg.Logger,
		Holders: []limits.HolderAdmitter{workflow.LimitHolder(cfg.Schema)}})
	if err != nil {
		return &queue.ConfigError{Name: "Limits", Reason: err.Error()}
	}
	if len(ls) > 0 {
		rcfg.Middleware = append(rcfg.Middleware, lim.Middleware())
	}
	// The process that enqueues a kind need not be one that works it (a web
	// process enqueues, workers work), so River's check that a kind has a
	// worker here before inserting it is off; Runtime.RiverConfigFunc,
	// called after, may turn it on again.
	riverConfigFunc := rcfg.RiverConfigFunc
	rcfg.RiverConfigFunc = func(rc *river.Config) {
		rc.SkipUnknownJobCheck = true
		if riverConfigFunc != nil {
			riverConfigFunc(rc)
		}
	}
	rt, err := queue.NewRuntime(a.pool, rcfg)
	if err != nil {
		return runtimeError(err)
	}
	a.rt, a.coord, a.workflows = rt, coord, workflow.NewClient(rt.Client)
	if err := a.newEmitter(); err != nil {
		return err
	}
	// One stager per process, shared by App.Stage and the AMQP batch queue.
	if a.stager, err = batch.NewStager(rt.Client, cfg.Batch.Streams); err != nil {
		return prefixed("Batch.Streams", err)
	}
	in := &installation{app: a, limiter: lim}
	if in.sink, err = cfg.openSink(); err != nil {
		return err
	}
	for _, inst := range installers() {
		if err := inst.install(in); err != nil {
			return fmt.Errorf("error setting up %s: %w", inst.name, err)
		}
	}
	return nil
}

// allLimits is Config.Limits and the limits of the capped consumers of
// Config.Consumers (events.Consumer.Limit).
func (cfg *Config) allLimits() []limits.Limit {
	ls := slices.Clip(cfg.Limits)
	for _, c := range cfg.Consumers {
		if l, ok := c.Limit(); ok {
			ls = append(ls, l)
		}
	}
	return ls
}

// newEmitter (re)builds the emitter behind App.Emit from the event types
// of Config.Events.Types and of the consumers' subscriptions as they are
// now: New calls it, and On again after each handler it adds.
func (a *App) newEmitter() error {
	cfg := a.cfg
	reg, err := cfg.eventRegistry()
	if err != nil {
		return &queue.ConfigError{Name: "Events.Types", Reason: err.Error()}
	}
	a.emitter, err = events.NewEmitter(events.EmitterConfig{
		Schema: cfg.Schema, Registry: reg, SourceService: cfg.Events.SourceService,
		MaxPayloadBytes: cfg.Events.MaxPayloadBytes, NoNotify: cfg.Events.NoNotify,
	})
	if err != nil {
		return &queue.ConfigError{Name: "Events", Reason: err.Error()}
	}
	return nil
}

// installLimits adds the admitter of Config.Limits and of the workflow
// concurrency keys, and its metrics.
func installLimits(in *installation) error {
	adm, err := in.limiter.Register(in.app.rt)
	if err != nil {
		return err
	}
	in.collectors = append(in.collectors, limits.NewCollector(adm))
	return nil
}

// installWorkflows adds the coordinator's repair sweep and, with
// Config.Workflows, the worker of workflow.StartArgs (schedules that start
// workflows).
func installWorkflows(in *installation) error {
	in.collectors = append(in.collectors, dashboard.NewWorkflowCollector(in.app.coord))
	if in.app.cfg.Workflows != nil {
		workflow.AddStartWorker(in.app.rt, in.app.cfg.Workflows)
	}
	return in.app.coord.Register(in.app.rt)
}

// installScheduler registers the clean-up worker and adds one scheduler
// service with the clean-up schedules and Config.Schedules.
func installScheduler(in *installation) error {
	cfg, rt := in.app.cfg, in.app.rt
	var schedules []scheduler.Schedule
	var cleaner *scheduler.Cleaner
	if !cfg.Cleanup.Disabled {
		ccfg := cfg.cleanupConfig()
		if cfg.Cleanup.ArchiveWorkflows {
			for i, t := range ccfg.Targets {
				if t.Name == workflow.Cleanup().Name {
					// Validate made sure of a sink.
					ccfg.Targets[i] = workflow.ArchiveCleanup(in.sink, workflow.ArchiveStream)
				}
			}
		}
		var err error
		if cleaner, err = scheduler.RegisterCleanup(rt, scheduler.CleanerConfig{Targets: ccfg.Targets, Logger: cfg.Logger}); err != nil {
			return err
		}
		if schedules, err = scheduler.CleanupSchedules(ccfg); err != nil {
			return &queue.ConfigError{Name: "Cleanup", Reason: err.Error()}
		}
	}
	schedules = append(schedules, cfg.Schedules...)
	// Installed also with no schedule yet: App.AddSchedule adds to it
	// before Start, in its place among the services.
	s := scheduler.New(rt.Client, scheduler.Config{Logger: cfg.Logger})
	if err := s.Add(schedules...); err != nil {
		return err
	}
	in.app.scheduler = s
	in.collectors = append(in.collectors, scheduler.NewCollector(s, cleaner))
	return rt.AddService(s)
}

// openSink returns Batch.Sink, or opens the sink Batch.SinkURL names; nil
// without either.
func (c Config) openSink() (batch.Sink, error) {
	if c.Batch.Sink != nil || c.Batch.SinkURL == "" {
		return c.Batch.Sink, nil
	}
	// Opening a sink checks its URL and, for a directory, creates it; it
	// does not connect anywhere.
	s, err := batch.OpenSink(context.Background(), c.Batch.SinkURL)
	if err != nil {
		return nil, &queue.ConfigError{Name: "Batch.SinkURL", Value: queue.RedactURL(c.Batch.SinkURL), Reason: err.Error()}
	}
	return s, nil
}

// installBatch registers the flush worker and the age timer when the
// process has a sink.
func installBatch(in *installation) error {
	cfg := in.app.cfg.Batch
	sink := in.sink
	if sink == nil {
		in.collectors = append(in.collectors, batch.NewCollector(in.app.stager, nil))
		return nil
	}
	logger := in.app.cfg.Logger
	fw, err := batch.Register(in.app.rt,
		batch.FlusherConfig{Streams: cfg.Streams, Sink: sink, Logger: logger},
		batch.AgeTimerConfig{Streams: cfg.Streams, Interval: cfg.TimerInterval, Logger: logger})
	if err != nil {
		return err
	}
	in.collectors = append(in.collectors, batch.NewCollector(in.app.stager, fw))
	return nil
}

// installAMQP adds, with the bridge on: a publisher (it connects on its
// first publish) and its counters, the batch queue's consumer, the
// consumers, the inbound bridges, and the outbound bridge as an outbox
// publisher. The batch consumer and the inbound bridges are added after
// the publisher, so they stop first: they stop taking deliveries, finish
// and ack what they hold, and only then the publisher and the flushes stop.
func installAMQP(in *installation) error {
	cfg := in.app.cfg
	a := cfg.AMQP
	if a.Bridge.URL == "" {
		return nil
	}
	bcfg := a.Bridge
	bcfg.Logger = cmp.Or(bcfg.Logger, cfg.Logger)
	rt := in.app.rt
	pub, err := amqpbridge.NewPublisher(bcfg)
	if err != nil {
		return prefixed("AMQP.Bridge", err)
	}
	if err := rt.AddService(pub); err != nil {
		return err
	}
	in.app.publisher = pub
	in.amqpCollector = amqpbridge.NewCollector()
	in.amqpCollector.AddPublisher(pub)
	in.collectors = append(in.collectors, in.amqpCollector)
	if q := a.BatchQueue; q.Queue != "" {
		stream := cmp.Or(q.Stream, q.Queue)
		c, err := amqpbridge.NewBatchConsumer(bcfg, amqpbridge.BatchConsumerConfig{
			Queue:   q.Queue,
			HandOff: amqpbatch.StageHandOff(in.app.stager, stream),
			Name:    "amqp batch consumer " + bcfg.QueueName(q.Queue) + " -> stream " + stream,
		})
		if err != nil {
			return &queue.ConfigError{Name: "AMQP.BatchQueue", Value: q.String(), Reason: err.Error()}
		}
		if err := rt.AddService(c); err != nil {
			return err
		}
		in.amqpCollector.AddBatchConsumer(c)
	}
	for i, cc := range a.Consumers {
		c, err := amqpbridge.NewConsumer(bcfg, cc)
		if err != nil {
			return &queue.ConfigError{Name: fmt.Sprintf("AMQP.Consumers[%d]", i), Value: cc.Queue, Reason: err.Error()}
		}
		if err := rt.AddService(c); err != nil {
			return err
		}
		in.amqpCollector.AddConsumer(c)
	}
	for i, ic := range a.Inbound {
		if ic.DB == nil {
			ic.DB = in.app.pool
		}
		ib, err := amqpbridge.NewInbound(bcfg, ic)
		if err != nil {
			return &queue.ConfigError{Name: fmt.Sprintf("AMQP.Inbound[%d]", i), Value: ic.Queue, Reason: err.Error()}
		}
		if err := rt.AddService(ib); err != nil {
			return err
		}
	}
	if a.OutboxExchange == "" {
		return nil
	}
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: a.OutboxExchange})
	if err != nil {
		return &queue.ConfigError{Name: "AMQP.OutboxExchange", Value: a.OutboxExchange, Reason: err.Error()}
	}
	in.outboxPublishers = append(in.outboxPublishers, out)
	return nil
}

// installEvents adds the dispatcher with the consumers, the in-database
// bus and the forwarder.
func installEvents(in *installation) error {
	cfg := in.app.cfg
	fcfg := cfg.Events.Forwarder
	fcfg.Publishers = append(append([]outbox.Publisher(nil), fcfg.Publishers...), in.outboxPublishers...)
	inst, err := events.Install(in.app.rt, events.InstallConfig{Consumers: cfg.Consumers, Forwarder: fcfg, NoForwarder: cfg.Events.NoForwarder})
	if err != nil {
		return err
	}
	in.app.dispatcher = inst.Dispatcher
	in.collectors = append(in.collectors, events.NewCollector(inst.Forwarder, inst.Dispatcher))
	return nil
}

// installDashboard serves the dashboard with the counters of every feature
// installed before it.
func installDashboard(in *installation) error {
	cfg := in.app.cfg
	d := cfg.Dashboard
	if d.Addr == "" {
		return nil
	}
	var amqpCfg *dashboard.AMQPConfig
	if cfg.AMQP.Bridge.URL != "" {
		bcfg := cfg.AMQP.Bridge
		bcfg.Logger = cmp.Or(bcfg.Logger, cfg.Logger)
		bcfg.ConnectionName = "tributary-dashboard"
		amqpCfg = &dashboard.AMQPConfig{Bridge: bcfg, Queues: d.AMQPQueues}
	}
	_, _, err := dashboard.InstallWorker(in.app.rt, dashboard.Config{
		Addr:       d.Addr,
		Token:      d.Token,
		Logger:     cfg.Logger,
		AMQP:       amqpCfg,
		Collectors: append(in.collectors, d.Collectors...),
	})
	return err
}
