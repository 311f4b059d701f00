package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tributary-run/tributary/outbox"
)

// errHeld marks an event not handed to a destination because an earlier
// event of its aggregate failed there in the same batch.
var errHeld = errors.New("held back behind an earlier event of its aggregate")

// eventOutcome is what one round did with one claimed event.
type eventOutcome struct {
	delivered []string // every destination that has it now
	errs      []string // "destination: error" for each destination that failed
}

// publishPlain hands the claimed events to every plain publisher that does
// not have them yet, each under PublishTimeout, and returns per event which
// destinations have it and which failed.
func (f *Forwarder) publishPlain(ctx context.Context, events []claimedEvent) []eventOutcome {
	outcomes := make([]eventOutcome, len(events))
	for i, e := range events {
		outcomes[i].delivered = slices.Clone(e.delivered)
	}
	for _, p := range f.plainPubs {
		name := p.Name()
		var idx []int
		var evs []outbox.Event
		for i, e := range events {
			if !slices.Contains(e.delivered, name) {
				idx = append(idx, i)
				evs = append(evs, e.Event)
			}
		}
		if len(evs) == 0 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
		var errs []error
		if ep, ok := p.(outbox.EventPublisher); ok {
			errs = publishInOrder(pctx, ep, evs)
		} else {
			err := callPlain(pctx, p, evs)
			errs = make([]error, len(evs))
			for k := range errs {
				errs[k] = err
			}
		}
		cancel()
		for k, i := range idx {
			switch err := errs[k]; {
			case err == nil:
				outcomes[i].delivered = append(outcomes[i].delivered, name)
			case errors.Is(err, errHeld):
				// Not tried: neither delivered nor charged.
			default:
				outcomes[i].errs = append(outcomes[i].errs, fmt.Sprintf("%s: %v", name, err))
			}
		}
	}
	return outcomes
}

// publishInOrder publishes evs (in emit order) through p in rounds: the
// opening round takes every event without an aggregate and the first event
// of each aggregate, the next round the second event of each aggregate
// whose first was accepted, and so on. Within a round the destination
// works on all events at once (an AMQP publisher keeps them in flight
// together); an aggregate's events go one round apart, and those behind an
// event that failed are held back (errHeld).
func publishInOrder(ctx context.Context, p outbox.EventPublisher, evs []outbox.Event) []error {
	out := make([]error, len(evs))
	var rounds [][]int
	seen := map[string]int{}
	for i, e := range evs {
		r := 0
		if e.AggregateID != "" {
			r = seen[e.AggregateID]
			seen[e.AggregateID] = r + 1
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	failed := map[string]bool{}
	for _, round := range rounds {
		var idx []int
		for _, i := range round {
			if agg := evs[i].AggregateID; agg != "" && failed[agg] {
				out[i] = errHeld
				continue
			}
			idx = append(idx, i)
		}
		if len(idx) == 0 {
			continue
		}
		batch := make([]outbox.Event, len(idx))
		for k, i := range idx {
			batch[k] = evs[i]
		}
		errs := callEach(ctx, p, batch)
		for k, i := range idx {
			out[i] = errs[k]
			if errs[k] != nil && evs[i].AggregateID != "" {
				failed[evs[i].AggregateID] = true
			}
		}
	}
	return out
}

// callPlain calls a plain publisher, turning a panic into an error.
func callPlain(ctx context.Context, p outbox.Publisher, evs []outbox.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("publisher panicked: %v", r)
		}
	}()
	return p.PublishOutbox(ctx, evs)
}

// callEach calls an outbox.EventPublisher, turning a panic or a result of the
// wrong length into an error for every event.
func callEach(ctx context.Context, p outbox.EventPublisher, evs []outbox.Event) (errs []error) {
	all := func(err error) []error {
		out := make([]error, len(evs))
		for i := range out {
			out[i] = err
		}
		return out
	}
	defer func() {
		if r := recover(); r != nil {
			errs = all(fmt.Errorf("publisher panicked: %v", r))
		}
	}()
	errs = p.PublishOutboxEvents(ctx, evs)
	if len(errs) != len(evs) {
		return all(fmt.Errorf("publisher returned %d results for %d events", len(errs), len(evs)))
	}
	return errs
}

func joinErrors(errs []string) string { return strings.Join(errs, "; ") }
