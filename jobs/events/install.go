package events

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// InstallConfig configures Install.
type InstallConfig struct {
	// Consumers to run in this process. May be empty: the process then only
	// forwards.
	Consumers []*Consumer

	// Forwarder configures the forwarder; Schema and Logger default to the
	// runtime's, ID to the runtime's River client id (the id of the
	// process's tributary_process row, so its claims are reset soon after
	// its heartbeat stops), and the bus is always its first publisher.
	Forwarder ForwarderConfig

	// NoForwarder leaves the forwarder out (a process that only consumes).
	NoForwarder bool

	// SkipQueueCheck lets Install add consumers whose queues the runtime
	// does not work: their dispatch jobs are run by other processes (or,
	// in a benchmark of the fan-out, by none).
	//
	// Defaults to false: Install returns an error naming the consumer and
	// its queue, as a consumer nobody works would silently receive nothing.
	SkipQueueCheck bool
}

// Installation is what Install added to a runtime.
type Installation struct {
	Dispatcher *Dispatcher
	Bus        *Bus
	Forwarder  *Forwarder // nil with NoForwarder
}

// Install wires the events machinery into a worker runtime: the dispatch
// worker and consumer registration (Dispatcher), the in-database Bus, and a
// Forwarder publishing to the bus and to cfg.Forwarder.Publishers.
//
// Every consumer's queue must be one rt works (queue.Runtime.Queues), unless
// cfg.SkipQueueCheck: a consumer's events are dispatched as jobs on its
// queue (ConsumerConfig.Queue, "events" unless set), and a queue nobody
// works delivers nothing.
func Install(rt *queue.Runtime, cfg InstallConfig) (*Installation, error) {
	if !cfg.SkipQueueCheck {
		worked := rt.Queues()
		for _, c := range cfg.Consumers {
			if c == nil {
				continue // NewDispatcher names it
			}
			if q := c.Config().Queue; worked[q] == 0 {
				return nil, fmt.Errorf("consumer %s dispatches on queue %q, which this runtime does not work (it works %s): add %q to RuntimeConfig.Queues, or set ConsumerConfig.Queue", c.Name(), q, queueNames(worked), q)
			}
		}
	}
	d, err := NewDispatcher(rt.Pool(), DispatcherConfig{Schema: rt.Schema(), Logger: rt.Logger(), Consumers: cfg.Consumers})
	if err != nil {
		return nil, err
	}
	if err := d.Register(rt); err != nil {
		return nil, err
	}
	bus, err := newBus(rt.Client)
	if err != nil {
		return nil, err
	}
	inst := &Installation{Dispatcher: d, Bus: bus}
	if cfg.NoForwarder {
		return inst, nil
	}
	fcfg := cfg.Forwarder
	fcfg.Schema = cmp.Or(fcfg.Schema, rt.Schema())
	fcfg.Logger = cmp.Or(fcfg.Logger, rt.Logger())
	fcfg.ID = cmp.Or(fcfg.ID, rt.River().ID())
	fcfg.LivenessTimeout = cmp.Or(fcfg.LivenessTimeout, rt.LivenessTimeout())
	fcfg.Publishers = append([]outbox.Publisher{bus}, fcfg.Publishers...)
	f, err := NewForwarder(rt.Pool(), fcfg)
	if err != nil {
		return nil, err
	}
	if err := rt.AddService(f); err != nil {
		return nil, err
	}
	inst.Forwarder = f
	return inst, nil
}

// queueNames returns the names of queues, sorted and comma-separated.
func queueNames(queues map[string]int) string {
	return strings.Join(slices.Sorted(maps.Keys(queues)), ", ")
}
