package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/inbox/amqpinbox"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// AMQPOptions configure RunAMQP.
type AMQPOptions struct {
	// URL of the broker. Defaults to amqpbridge.URLDefault.
	URL string
	// Messages per measurement. Defaults to 50,000.
	Messages int
	// Rounds of every measurement; the report gives the medians. Defaults
	// to 3.
	Rounds int
	// BodyBytes is the size of each JSON body. Defaults to 200.
	BodyBytes int
	// ConfirmWindow for both publish loops. Defaults to 512.
	ConfirmWindow int
	// Prefetch of the bare consume loop. Defaults to 300.
	Prefetch int
	// BridgePrefetch is the inbound bridge's prefetch
	// (InboundConfig.Prefetch). Defaults to its default,
	// amqpbridge.InboundPrefetchDefault.
	BridgePrefetch int
	// DB and Jobs enable the inbound measurement (AMQP -> River job); with
	// either nil it is skipped.
	DB   queue.DBTX
	Jobs amqpbridge.JobEnqueuer
	// InboundConcurrency and InboundBatchSize tune the inbound bridge
	// (InboundConfig.Concurrency, BatchSize); zero takes its defaults.
	InboundConcurrency, InboundBatchSize int
	// JobKind of the inserted jobs. Defaults to "bench.amqp".
	JobKind string
	// Bus, when set, adds a third consumer to each round: the inbound
	// bridge handing each message to the event bus (EventInserter, type
	// AMQPEventType), against the same bare loop.
	Bus outbox.TxPublisher
	// InboxSchema, when set (with DB and Jobs), adds the inbox side to each
	// round: the inbound bridge writing each batch of messages as one inbox
	// batch (amqpinbox.Statements) into this schema, with the job side's
	// prefetch, inserters and batch size, against the same bare loop; it is
	// then the goal's side (ratio >= 0.80). After the rounds, a runtime with
	// the inbox installed handles the last round's backlog (the handled
	// measurement).
	InboxSchema string
	// InboxWorkers is the River workers of the handled measurement.
	// Defaults to AMQPInboxWorkersDefault (10).
	InboxWorkers int
	// Logger for the bridge. Defaults to a discarding logger.
	Logger *slog.Logger
}

// AMQPResult holds the measured rates in messages per second (medians over
// the rounds) and the ratios tributary / bare (medians of the per-round
// ratios: the two runs of a round follow each other, so load from elsewhere
// on the machine hits both alike).
type AMQPResult struct {
	Messages  int `json:"messages"`
	Rounds    int `json:"rounds"`
	BodyBytes int `json:"body_bytes"`

	PublishBare   float64 `json:"publish_bare_msgs_per_sec"`
	PublishBridge float64 `json:"publish_tributary_msgs_per_sec"`
	PublishRatio  float64 `json:"publish_ratio"`
	InboundBare   float64 `json:"inbound_bare_msgs_per_sec"`
	InboundBridge float64 `json:"inbound_tributary_msgs_per_sec"`
	InboundRatio  float64 `json:"inbound_ratio"`
	// PublishRatios and InboundRatios are the per-round ratios the medians
	// are taken from; their spread is how steady the comparison was.
	PublishRatios []float64 `json:"publish_ratios"`
	InboundRatios []float64 `json:"inbound_ratios"`
	// InboundEvents* are the same for the bridge feeding the event bus
	// (AMQPOptions.Bus); zero without one.
	InboundEvents       float64   `json:"inbound_events_msgs_per_sec,omitempty"`
	InboundEventsRatio  float64   `json:"inbound_events_ratio,omitempty"`
	InboundEventsRatios []float64 `json:"inbound_events_ratios,omitempty"`
	InboundEventsCPU    amqpCPU   `json:"inbound_events_cpu_per_msg"`
	// InboundInbox* are the same for the bridge writing inbox batches
	// (AMQPOptions.InboxSchema), the goal's side when set; zero
	// without it. InboxHandled is the rate at which a runtime with the inbox
	// installed handled one round's backlog, and InboxHandledCPU its CPU.
	InboundInbox       float64   `json:"inbound_inbox_msgs_per_sec,omitempty"`
	InboundInboxRatio  float64   `json:"inbound_inbox_ratio,omitempty"`
	InboundInboxRatios []float64 `json:"inbound_inbox_ratios,omitempty"`
	InboundInboxCPU    amqpCPU   `json:"inbound_inbox_cpu_per_msg"`
	InboxHandled       float64   `json:"inbox_handled_msgs_per_sec,omitempty"`
	InboxHandledCPU    amqpCPU   `json:"inbox_handled_cpu_per_msg"`
	// InsertOnly is the rate of the inbound bridge's inserts (same batch
	// size and concurrency) with no broker involved.
	InsertOnly float64 `json:"insert_only_jobs_per_sec"`
	// InboundBareCPU, InboundBridgeCPU and InsertOnlyCPU are the CPU spent
	// per message (medians over the rounds) by the broker, the database
	// backends and this process: on a machine where the CPU is the limit,
	// they bound the inbound ratio whatever the rates of a noisy run.
	InboundBareCPU   amqpCPU `json:"inbound_bare_cpu_per_msg"`
	InboundBridgeCPU amqpCPU `json:"inbound_tributary_cpu_per_msg"`
	InsertOnlyCPU    amqpCPU `json:"insert_only_cpu_per_msg"`
}

// amqpCPU is CPU per message, split by who spent it. Broker and Database
// are zero (unknown) when that server's processes cannot be read here.
type amqpCPU struct {
	Broker   time.Duration `json:"broker_ns"`
	Database time.Duration `json:"database_ns"`
	Self     time.Duration `json:"process_ns"`
}

func (c amqpCPU) String() string {
	us := func(d time.Duration) string {
		if d <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3)
	}
	return fmt.Sprintf("%s us/msg (broker %s + Postgres %s + this process %s)", us(c.Broker+c.Database+c.Self), us(c.Broker), us(c.Database), us(c.Self))
}

// cpuMeter reads the CPU of this process, of the benchmark's Postgres
// backends and of the broker (a local RabbitMQ, found by its beam.smp
// process), so a side's CPU per message can be told apart from the
// machine's load.
type cpuMeter struct {
	db     *cpuPool // nil: database CPU unknown
	broker uint32   // 0: broker CPU unknown
}

func newCPUMeter(db *cpuPool) cpuMeter {
	m := cpuMeter{db: db}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.ParseUint(d.Name(), 10, 32)
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "beam.smp" {
			m.broker = uint32(pid)
			break
		}
	}
	return m
}

// start returns a function that gives the CPU per message of n messages
// since start was called.
func (m cpuMeter) start() func(n int) amqpCPU {
	var dbMark cpuMark
	if m.db != nil {
		dbMark = m.db.mark()
	}
	self := selfCPU()
	broker, _ := processCPU(m.broker)
	return func(n int) amqpCPU {
		var c amqpCPU
		c.Self = selfCPU() - self
		if m.db != nil {
			_, c.Database = m.db.since(dbMark)
		}
		if m.broker != 0 {
			if now, ok := processCPU(m.broker); ok {
				c.Broker = now - broker
			}
		}
		n = max(1, n)
		return amqpCPU{Broker: c.Broker / time.Duration(n), Database: c.Database / time.Duration(n), Self: c.Self / time.Duration(n)}
	}
}

// total is the CPU of a message, whoever spent it.
func (c amqpCPU) total() float64 { return float64(c.Broker + c.Database + c.Self) }

func medianCPU(cs []amqpCPU) amqpCPU {
	pick := func(f func(amqpCPU) time.Duration) time.Duration {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = float64(f(c))
		}
		return time.Duration(median(v))
	}
	return amqpCPU{
		Broker:   pick(func(c amqpCPU) time.Duration { return c.Broker }),
		Database: pick(func(c amqpCPU) time.Duration { return c.Database }),
		Self:     pick(func(c amqpCPU) time.Duration { return c.Self }),
	}
}

// RunAMQP measures the AMQP bridge beside bare amqp091-go loops in the same
// run, so the ratio holds on whatever machine runs it:
//
//   - publish with confirms: Publisher.PublishMany against a bare loop that
//     keeps the same confirm window (512) of DeferredConfirmations;
//   - inbound AMQP -> job: the Inbound bridge inserting River jobs (at its
//     own prefetch, AMQPOptions.BridgePrefetch) against a bare consumer with
//     prefetch 300 and multiple acks that inserts nothing;
//   - inbound AMQP -> inbox (with AMQPOptions.InboxSchema): the same bridge
//     writing one inbox batch per transaction, against the same bare loop;
//     then the messages/s a runtime handles of one round's inbox backlog;
//   - inbound AMQP -> event bus (with AMQPOptions.Bus).
//
// It writes a small report to w.
func RunAMQP(ctx context.Context, opts AMQPOptions, w io.Writer) (AMQPResult, error) {
	opts.URL = cmp.Or(opts.URL, amqpbridge.URLDefault)
	opts.Messages = cmp.Or(opts.Messages, 50000)
	opts.Rounds = cmp.Or(opts.Rounds, 3)
	opts.BodyBytes = cmp.Or(opts.BodyBytes, 200)
	opts.ConfirmWindow = cmp.Or(opts.ConfirmWindow, 512)
	opts.Prefetch = cmp.Or(opts.Prefetch, 300)
	opts.JobKind = cmp.Or(opts.JobKind, "bench.amqp")
	opts.InboxWorkers = cmp.Or(opts.InboxWorkers, AMQPInboxWorkersDefault)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	res := AMQPResult{Messages: opts.Messages, Rounds: opts.Rounds, BodyBytes: opts.BodyBytes}

	conn, err := amqp.Dial(opts.URL)
	if err != nil {
		return res, fmt.Errorf("error connecting to %s: %w", queue.RedactURL(opts.URL), err)
	}
	defer conn.Close()
	suffix := randomSuffix()
	cfg := amqpbridge.Config{
		URL: opts.URL, ConfirmWindow: opts.ConfirmWindow, ConnectionName: "tributary-bench-" + suffix,
		MaxMessageBytes: max(amqpbridge.MaxMessageBytesDefault, opts.BodyBytes), Logger: opts.Logger,
	}
	body := makeBody(opts.BodyBytes)

	fmt.Fprintf(w, "AMQP bench: %d messages of %d bytes, persistent, durable queues\n", opts.Messages, len(body))

	// Publish with confirms.
	bareQ, err := declareQueue(conn, "bench-publish-bare-"+suffix, nil)
	if err != nil {
		return res, err
	}
	defer deleteQueue(conn, bareQ)
	// The bridge's queue is declared as the inbound bridge declares it
	// (dead-lettering to .failed), with its retry and failed queues removed
	// afterwards too.
	bridgeQ, dropBridgeQ, err := declareBridgeQueue(conn, cfg, "bench-publish-bridge-"+suffix)
	if err != nil {
		return res, err
	}
	defer dropBridgeQ()

	withDB := opts.DB != nil && opts.Jobs != nil
	withBus := withDB && opts.Bus != nil
	withInbox := withDB && opts.InboxSchema != ""
	var inboxQ string
	if withInbox {
		// The inbox side's queue, declared and filled like the event side's.
		var dropInboxQ func()
		if inboxQ, dropInboxQ, err = declareBridgeQueue(conn, cfg, "bench-inbound-inbox-"+suffix); err != nil {
			return res, err
		}
		defer dropInboxQ()
	}
	var eventsQ string
	if withBus {
		// The event side's queue, declared like the bridge's; filled by
		// the bare publisher each round (that publish is not measured).
		var dropEventsQ func()
		if eventsQ, dropEventsQ, err = declareBridgeQueue(conn, cfg, "bench-inbound-events-"+suffix); err != nil {
			return res, err
		}
		defer dropEventsQ()
	}
	var pubBare, pubBridge, inBare, inBridge, inEvents, inInbox []float64
	var inStats, evStats, ibStats []amqpbridge.BatchStats
	var cpuBare, cpuBridge, cpuEvents, cpuInbox []amqpCPU
	var dbCPU *cpuPool
	if p, ok := opts.DB.(*pgxpool.Pool); ok && withDB {
		// The bridge's transactions on a pool of their own, so the CPU of
		// its backends can be read.
		if dbCPU, err = newCPUPool(ctx, p); err != nil {
			return res, err
		}
		defer dbCPU.Close()
		opts.DB = dbCPU
	}
	meter := newCPUMeter(dbCPU)
	// The sides in the order their publishers and consumers are listed
	// below; the goal's two are the bare loop and the inbox (the River job
	// side without one).
	names := []string{"bare", "River jobs"}
	if withBus {
		names = append(names, "event bus")
	}
	goalSide := 1
	if withInbox {
		names = append(names, "inbox")
		goalSide = len(names) - 1
	}
	for round := range opts.Rounds {
		// Alternate who goes first, so neither side always gets the warmer
		// broker.
		publishers := []func() error{
			func() error {
				d, err := barePublish(ctx, conn, bareQ, body, opts.Messages, opts.ConfirmWindow)
				pubBare = append(pubBare, rate(opts.Messages, d))
				return wrap("bare publish", err)
			},
			func() error {
				d, err := bridgePublish(ctx, cfg, bridgeQ, body, opts.Messages)
				pubBridge = append(pubBridge, rate(opts.Messages, d))
				return wrap("bridge publish", err)
			},
		}
		consumers := []func() error{
			func() error {
				cpu := meter.start()
				d, err := bareConsume(ctx, conn, bareQ, opts.Messages, opts.Prefetch)
				inBare = append(inBare, rate(opts.Messages, d))
				cpuBare = append(cpuBare, cpu(opts.Messages))
				return wrap("bare consume", err)
			},
			func() error {
				cpu := meter.start()
				d, st, err := bridgeInbound(ctx, cfg, bridgeQ, opts, func(ic *amqpbridge.InboundConfig) { ic.Insert = jobInserter(opts) })
				inBridge = append(inBridge, rate(opts.Messages, d))
				cpuBridge = append(cpuBridge, cpu(opts.Messages))
				inStats = append(inStats, st)
				return wrap("bridge inbound", err)
			},
		}
		if withBus {
			publishers = append(publishers, func() error {
				_, err := barePublish(ctx, conn, eventsQ, body, opts.Messages, opts.ConfirmWindow)
				return wrap("publish for the event side", err)
			})
			consumers = append(consumers, func() error {
				cpu := meter.start()
				d, st, err := bridgeInbound(ctx, cfg, eventsQ, opts, func(ic *amqpbridge.InboundConfig) {
					ic.Insert = amqpbridge.EventInserter(opts.Bus, amqpbridge.EventInserterConfig{EventType: AMQPEventType})
				})
				inEvents = append(inEvents, rate(opts.Messages, d))
				cpuEvents = append(cpuEvents, cpu(opts.Messages))
				evStats = append(evStats, st)
				return wrap("bridge inbound to the event bus", err)
			})
		}
		if withInbox {
			publishers = append(publishers, func() error {
				_, err := barePublish(ctx, conn, inboxQ, body, opts.Messages, opts.ConfirmWindow)
				return wrap("publish for the inbox side", err)
			})
			consumers = append(consumers, func() error {
				ib, err := amqpInbox(round, nil)
				if err != nil {
					return err
				}
				cpu := meter.start()
				d, st, err := bridgeInbound(ctx, cfg, inboxQ, opts, func(ic *amqpbridge.InboundConfig) {
					ic.InsertStatements = amqpinbox.Statements(ib, opts.InboxSchema)
				})
				inInbox = append(inInbox, rate(opts.Messages, d))
				cpuInbox = append(cpuInbox, cpu(opts.Messages))
				ibStats = append(ibStats, st)
				return wrap("bridge inbound to an inbox", err)
			})
		}
		order := roundOrder(len(publishers), goalSide, round)
		steps := make([]func() error, 0, 2*len(order)+1)
		var checkpoints []time.Duration
		for _, i := range order {
			steps = append(steps, publishers[i])
			if !withDB {
				continue
			}
			// Each queue is consumed right after it was filled, with no other
			// queue full in the broker: with every queue filled at once, each
			// consume finds the broker at one of two costs (about 20 or 40
			// µs a message), and the side that gets the cheap one decides the
			// round (per-round ratios from 0.37 to 1.36 in one run).
			consume := consumers[i]
			steps = append(steps, func() error {
				// Every consume starts with the database's pages written:
				// otherwise a side after the River job side (100,000 jobs
				// and their indexes) paid for that side's checkpoint.
				if dbCPU != nil {
					if took, ok := checkpointOrSay(ctx, dbCPU.Pool, w, "before a consume"); ok {
						checkpoints = append(checkpoints, took)
					}
				}
				return consume()
			})
		}
		if !withDB {
			// Nothing consumes: empty the queues for the next round.
			steps = append(steps, func() error { return purge(conn, bareQ, bridgeQ) })
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return res, err
			}
		}
		fmt.Fprintf(w, "round %d: publish bare %.0f, tributary %.0f msg/s", round+1, pubBare[round], pubBridge[round])
		if withDB {
			st := inStats[round]
			fmt.Fprintf(w, "; inbound bare %.0f, tributary %.0f msg/s (%d transactions of %.0f on average, %.2fs of inserts, %.2fs waited for an inserter)\n  CPU: bare %s; tributary %s",
				inBare[round], inBridge[round], st.Flushes, float64(st.HandedOff)/float64(max(1, st.Flushes)), st.HandOffTime.Seconds(), st.SlotWait.Seconds(),
				cpuBare[round], cpuBridge[round])
			if withInbox {
				st := ibStats[round]
				fmt.Fprintf(w, "\n  inbound to an inbox %.0f msg/s (ratio %.2f; %d transactions of %.0f on average, %.2fs of inserts, %.2fs waited for an inserter), CPU %s",
					inInbox[round], inInbox[round]/inBare[round], st.Flushes, float64(st.HandedOff)/float64(max(1, st.Flushes)), st.HandOffTime.Seconds(), st.SlotWait.Seconds(), cpuInbox[round])
			}
			if withBus {
				st := evStats[round]
				fmt.Fprintf(w, "\n  inbound to the event bus %.0f msg/s (ratio %.2f; %d transactions of %.0f on average), CPU %s",
					inEvents[round], inEvents[round]/inBare[round], st.Flushes, float64(st.HandedOff)/float64(max(1, st.Flushes)), cpuEvents[round])
			}
		}
		if withDB {
			fmt.Fprintf(w, "\n  order %s", joinEach(order, func(i int) string { return names[i] }))
			if len(checkpoints) > 0 {
				fmt.Fprintf(w, "; CHECKPOINT before each consume took %s", joinEach(checkpoints, ms))
			}
		}
		fmt.Fprintln(w)
	}
	res.PublishBare, res.PublishBridge = median(pubBare), median(pubBridge)
	res.PublishRatio = medianRatio(pubBridge, pubBare)
	res.PublishRatios = ratios(pubBridge, pubBare)
	fmt.Fprintf(w, "publish with confirms (window %d): bare amqp091-go %.0f msg/s, tributary Publisher %.0f msg/s, ratio %.2f (goal >= 0.80); %s\n",
		opts.ConfirmWindow, res.PublishBare, res.PublishBridge, res.PublishRatio, spread(res.PublishRatios))
	if !withDB {
		fmt.Fprintln(w, "inbound AMQP -> job: skipped (no database)")
		return res, nil
	}
	ic := inbound(opts)
	// The inbox side's bridge: InsertStatements, whose concurrency has a
	// default of its own.
	ib := amqpbridge.InboundConfig{Prefetch: opts.BridgePrefetch, Concurrency: opts.InboundConcurrency, BatchSize: opts.InboundBatchSize,
		InsertStatements: func(context.Context, *amqpbridge.Statements, []*amqpbridge.Delivery) error { return nil }}.WithDefaults()
	res.InboundBare, res.InboundBridge = median(inBare), median(inBridge)
	res.InboundRatio = medianRatio(inBridge, inBare)
	res.InboundRatios = ratios(inBridge, inBare)
	res.InboundBareCPU, res.InboundBridgeCPU = medianCPU(cpuBare), medianCPU(cpuBridge)
	if withInbox {
		// The goal's side first; the job side beside it, labelled.
		res.InboundInbox = median(inInbox)
		res.InboundInboxRatio = medianRatio(inInbox, inBare)
		res.InboundInboxRatios = ratios(inInbox, inBare)
		res.InboundInboxCPU = medianCPU(cpuInbox)
		fmt.Fprintf(w, "inbound: bare amqp091-go consume+ack (prefetch %d, multiple ack) %.0f msg/s, tributary AMQP -> inbox (amqpinbox.Statements: one batch row and job per transaction, one round trip; prefetch %d, %d inserters of %d) %.0f msg/s, ratio %.2f (goal >= 0.80); %s\n",
			opts.Prefetch, res.InboundBare, ib.Prefetch, ib.Concurrency, ib.BatchSize, res.InboundInbox, res.InboundInboxRatio, spread(res.InboundInboxRatios))
		fmt.Fprintf(w, "inbound, one River job per message (JobInserter, beside the goal's side): tributary AMQP -> River job (prefetch %d, %d inserters of %d) %.0f msg/s, ratio %.2f against the same bare loop; %s\n",
			ic.Prefetch, ic.Concurrency, ic.BatchSize, res.InboundBridge, res.InboundRatio, spread(res.InboundRatios))
	} else {
		fmt.Fprintf(w, "inbound: bare amqp091-go consume+ack (prefetch %d, multiple ack) %.0f msg/s, tributary AMQP -> River job (prefetch %d, %d inserters of %d) %.0f msg/s, ratio %.2f (goal >= 0.80); %s\n",
			opts.Prefetch, res.InboundBare, ic.Prefetch, ic.Concurrency, ic.BatchSize, res.InboundBridge, res.InboundRatio, spread(res.InboundRatios))
	}
	if withBus {
		res.InboundEvents = median(inEvents)
		res.InboundEventsRatio = medianRatio(inEvents, inBare)
		res.InboundEventsRatios = ratios(inEvents, inBare)
		res.InboundEventsCPU = medianCPU(cpuEvents)
		fmt.Fprintf(w, "inbound: tributary AMQP -> event bus (EventInserter, batched dispatch jobs) %.0f msg/s, ratio %.2f (goal >= 0.80); %s\n",
			res.InboundEvents, res.InboundEventsRatio, spread(res.InboundEventsRatios))
	}
	// The bridge's ceiling on this machine right now: the same inserts
	// without RabbitMQ.
	cpu := meter.start()
	d, err := dbOnly(ctx, opts)
	if err != nil {
		return res, fmt.Errorf("database-only insert: %w", err)
	}
	res.InsertOnly = rate(opts.Messages, d)
	res.InsertOnlyCPU = cpu(opts.Messages)
	fmt.Fprintf(w, "reference: the same River batch inserts without RabbitMQ %.0f jobs/s (the River job side's ceiling here)\n", res.InsertOnly)
	fmt.Fprintf(w, "CPU per message (medians): bare consume %s; tributary inbound to River jobs %s; inserts alone %s\n", res.InboundBareCPU, res.InboundBridgeCPU, res.InsertOnlyCPU)
	if withInbox {
		fmt.Fprintf(w, "CPU per message (medians): tributary inbound to an inbox %s\n", res.InboundInboxCPU)
	}
	if withBus {
		fmt.Fprintf(w, "CPU per message (medians): tributary inbound to the event bus %s\n", res.InboundEventsCPU)
	}
	if b, t := res.InboundBareCPU, res.InboundBridgeCPU; b.Broker > 0 && t.Database > 0 {
		// Where the CPU is what limits both sides, the ratio cannot
		// exceed this. The broker's part is not a cost of the work: it
		// spends about a core whatever the rate, so its CPU a message
		// grows as the rate falls, and this reads the rates as much as it
		// bounds them.
		fmt.Fprintf(w, "CPU a message, bare over tributary, River jobs: %.2f (a ceiling of the ratio only where the CPU limits both; the broker's CPU a message follows the rate)\n", b.total()/t.total())
		if t := res.InboundInboxCPU; withInbox && t.Database > 0 {
			fmt.Fprintf(w, "CPU a message, bare over tributary, inbox: %.2f\n", b.total()/t.total())
		}
	}
	if withInbox {
		if err := measureInboxHandled(ctx, opts, dbCPU, meter, &res, w); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(w, "(rates: medians of %d rounds, alternating which side goes first; ratios: median of the per-round ratios, each from two back-to-back runs)\n", opts.Rounds)
	return res, nil
}

func wrap(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func purge(conn *amqp.Connection, queues ...string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueuePurge(q, false); err != nil {
			return fmt.Errorf("error purging %q: %w", q, err)
		}
	}
	return nil
}

func makeBody(n int) []byte {
	const prefix = `{"pad":"`
	pad := max(0, n-len(prefix)-2)
	b := make([]byte, 0, n)
	b = append(b, prefix...)
	for range pad {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

func declareQueue(conn *amqp.Connection, name string, args amqp.Table) (string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return "", fmt.Errorf("error declaring %q: %w", name, err)
	}
	return name, nil
}

// declareBridgeQueue declares name's main queue as the inbound bridge
// declares it (dead-lettering to its .failed queue), and returns a func
// that deletes its topology's queues.
func declareBridgeQueue(conn *amqp.Connection, cfg amqpbridge.Config, name string) (string, func(), error) {
	topo := cfg.Topology(name)
	q, err := declareQueue(conn, topo.Main, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": topo.Failed})
	if err != nil {
		return "", nil, err
	}
	return q, func() {
		deleteQueue(conn, topo.Main)
		deleteQueue(conn, topo.Failed)
		for _, r := range topo.Retry {
			deleteQueue(conn, r.Queue)
		}
	}, nil
}

func deleteQueue(conn *amqp.Connection, name string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	_, _ = ch.QueueDelete(name, false, false, false)
}

// barePublish is the baseline: one confirm-mode channel, deferred confirms,
// at most window outstanding.
func barePublish(ctx context.Context, conn *amqp.Connection, q string, body []byte, n, window int) (time.Duration, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	pending := make([]*amqp.DeferredConfirmation, 0, n)
	head := 0
	start := time.Now()
	for range n {
		if len(pending)-head == window {
			if ok, err := pending[head].WaitContext(ctx); err != nil || !ok {
				return 0, cmp.Or(err, errors.New("nacked"))
			}
			head++
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body,
		})
		if err != nil {
			return 0, err
		}
		pending = append(pending, dc)
	}
	for ; head < len(pending); head++ {
		if ok, err := pending[head].WaitContext(ctx); err != nil || !ok {
			return 0, cmp.Or(err, errors.New("nacked"))
		}
	}
	return time.Since(start), nil
}

func bridgePublish(ctx context.Context, cfg amqpbridge.Config, q string, body []byte, n int) (time.Duration, error) {
	pub, err := amqpbridge.NewPublisher(cfg)
	if err != nil {
		return 0, err
	}
	defer func() { _ = pub.Stop(context.Background()) }()
	msgs := make([]amqpbridge.Message, n)
	for i := range msgs {
		msgs[i] = amqpbridge.Message{RoutingKey: q, Publishing: amqp.Publishing{ContentType: "application/json", Body: body}}
	}
	if err := pub.Connect(ctx); err != nil { // the bare loop's connection is open too
		return 0, err
	}
	start := time.Now()
	if err := pub.PublishMany(ctx, msgs); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// bareConsume is the baseline: prefetch, and a multiple ack every half
// prefetch.
func bareConsume(ctx context.Context, conn *amqp.Connection, q string, n, prefetch int) (time.Duration, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	every := max(1, prefetch/2)
	start := time.Now() // from the subscription on, like the bridge's side
	for i := 1; i <= n; i++ {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, errors.New("consumer channel closed")
			}
			if i%every == 0 || i == n {
				if err := d.Ack(true); err != nil {
					return 0, err
				}
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return time.Since(start), nil
}

// roundOrder is the order of a round's n sides (0 the bare loop, goal the
// side the goal's ratio is taken of): the two next to each other, so the
// ratio is of two runs that follow each other, as the report says, then
// the others; every other round the order is reversed, so that neither of
// the pair always goes first. Rotating the sides instead would put up to
// three consumes, one of 100,000 River jobs among them, between the inbox
// side and the bare loop it is divided by.
func roundOrder(n, goal, round int) []int {
	order := []int{0, goal}
	for i := 1; i < n; i++ {
		if i != goal {
			order = append(order, i)
		}
	}
	if round%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// joinEach joins what each of xs reads as, with commas.
func joinEach[T any](xs []T, str func(T) string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = str(x)
	}
	return strings.Join(s, ", ")
}

// inbound is the inbound bridge's configuration for opts, with its
// defaults resolved.
func inbound(opts AMQPOptions) amqpbridge.InboundConfig {
	return amqpbridge.InboundConfig{
		Prefetch: opts.BridgePrefetch, Concurrency: opts.InboundConcurrency, BatchSize: opts.InboundBatchSize,
	}.WithDefaults()
}

// dbOnly inserts opts.Messages jobs like the inbound bridge does (batches of
// its batch size, its number of concurrent transactions), without AMQP.
func dbOnly(ctx context.Context, opts AMQPOptions) (time.Duration, error) {
	ic := inbound(opts)
	concurrency, batchSize := ic.Concurrency, ic.BatchSize
	insert := jobInserter(opts)
	body := makeBody(opts.BodyBytes)
	batches := make(chan int)
	errs := make(chan error, concurrency)
	start := time.Now()
	for range concurrency {
		go func() {
			var err error
			for n := range batches {
				if err != nil {
					continue
				}
				ds := make([]*amqpbridge.Delivery, n)
				for i := range ds {
					ds[i] = &amqpbridge.Delivery{Body: body}
				}
				var tx pgx.Tx
				if tx, err = opts.DB.Begin(ctx); err != nil {
					continue
				}
				if err = insert(ctx, tx, ds); err != nil {
					_ = tx.Rollback(ctx)
					continue
				}
				err = tx.Commit(ctx)
			}
			errs <- err
		}()
	}
	for left := opts.Messages; left > 0; left -= batchSize {
		batches <- min(left, batchSize)
	}
	close(batches)
	var firstErr error
	for range concurrency {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return time.Since(start), firstErr
}

// jobInserter is the job side's insert: one River job per message.
func jobInserter(opts AMQPOptions) amqpbridge.InsertBatchFunc {
	return amqpbridge.JobInserter(opts.Jobs, opts.JobKind, &queue.EnqueueOpts{Queue: "bench_amqp"})
}

// bridgeInbound runs an inbound bridge on q until it handed off
// opts.Messages; with sets its insert function.
func bridgeInbound(ctx context.Context, cfg amqpbridge.Config, q string, opts AMQPOptions, with func(*amqpbridge.InboundConfig)) (time.Duration, amqpbridge.BatchStats, error) {
	ic := amqpbridge.InboundConfig{
		Queue: q, DB: opts.DB, Prefetch: opts.BridgePrefetch, Concurrency: opts.InboundConcurrency, BatchSize: opts.InboundBatchSize,
	}
	with(&ic)
	in, err := amqpbridge.NewInbound(cfg, ic)
	if err != nil {
		return 0, amqpbridge.BatchStats{}, err
	}
	if err := in.Start(ctx); err != nil {
		return 0, amqpbridge.BatchStats{}, err
	}
	// Like the bare loop, timed from the subscription on (Start returns once
	// subscribed; the dial and declarations are not part of the rate).
	start := time.Now()
	defer func() { _ = in.Stop(context.Background()) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for in.Stats().HandedOff < uint64(opts.Messages) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, amqpbridge.BatchStats{}, ctx.Err()
		}
	}
	took := time.Since(start)
	return took, in.Stats(), nil
}

// AMQPEventType is the event type of the inbound bridge's messages on the
// event side of RunAMQP.
const AMQPEventType = "bench.amqp"

type amqpEventPayload struct {
	Pad string `json:"pad"`
}

// AMQPEventBus starts a runtime on a fresh schema with the events machinery
// (no forwarder) and one consumer subscribed to AMQPEventType with the
// default batched dispatch, whose queue nothing works: like the job side,
// the event side measures the bridge's writes, not the handling. It
// returns the bus for AMQPOptions.Bus and a func that stops the runtime and
// drops the schema.
func AMQPEventBus(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (outbox.TxPublisher, func(), error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_amqp_events")
	if err != nil {
		return nil, nil, err
	}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "bench_amqp", Queue: "bench_amqp_events"})
	if err != nil {
		drop()
		return nil, nil, err
	}
	events.On(c, events.Define[amqpEventPayload](AMQPEventType, nil), func(context.Context, events.Message[amqpEventPayload]) error { return nil })
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema, Logger: logger, Queues: map[string]int{"bench_amqp_idle": 1}})
	if err != nil {
		drop()
		return nil, nil, err
	}
	inst, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, NoForwarder: true, SkipQueueCheck: true})
	if err != nil {
		drop()
		return nil, nil, err
	}
	if err := rt.Start(ctx); err != nil {
		drop()
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
		drop()
	}
	return inst.Bus, stop, nil
}
