package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoevents"
	"github.com/tributary-run/tributary/jobs/events"
)

func newEmitCmd(a *app) *cobra.Command {
	var meta events.Meta
	var source string
	var asJSON, anyType bool
	cmd := &cobra.Command{
		Use:   "emit EVENT_TYPE JSON",
		Short: "Write an event to the outbox; the forwarder delivers it to every subscribed consumer",
		Long: `Write one event to the transactional outbox. The event type must be one the
CLI knows (the demo events: ` + fmt.Sprint(demoevents.Registry().Names()) + `), and the JSON
payload must fit its type exactly (no unknown fields, right value types) and
pass its validation. Nothing is written when it does not. With --any-type
any other event type may be emitted too (one your own services define), with
any JSON payload in which no object repeats a key: the consumers that
subscribe to it decode and validate it.
JSON "-" reads the payload from stdin. Prints the event id.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			eventType, payload := args[0], json.RawMessage(args[1])
			if args[1] == "-" {
				// Payloads can be bigger than one command-line argument
				// may be (128 KiB on Linux): read them from stdin.
				raw, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
				if err != nil {
					return fmt.Errorf("error reading the payload from stdin: %w", err)
				}
				payload = raw
			}
			reg, err := emitRegistry(eventType, anyType)
			if err != nil {
				return err
			}
			em, err := events.NewEmitter(events.EmitterConfig{Schema: a.cfg.Schema, Registry: reg, SourceService: source})
			if err != nil {
				return usagef("%v", err)
			}
			if !json.Valid(payload) {
				return usagef("payload for %s is not valid JSON: %q", eventType, emitPreview(string(payload), 60))
			}
			// Every check that needs no database runs first: a bad event
			// type or payload is a usage error and nothing is written.
			if err := em.ValidateJSON(eventType, payload); err != nil {
				return usagef("%v", err)
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			id, err := em.EmitJSON(ctx, pool, eventType, payload, meta)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]string{"id": id, "event_type": eventType})
			}
			fmt.Fprintln(a.stdout, id)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&meta.AggregateID, "aggregate", "", "aggregate id: events of one aggregate are handled in emit order")
	f.StringVar(&meta.CorrelationID, "correlation", "", "correlation id passed to handlers")
	f.StringVar(&meta.CausationID, "causation", "", "id of the message that caused this event")
	f.StringVar(&meta.Actor, "actor", "", "who caused the event")
	f.StringVar(&source, "source", "cli", "source service recorded with the event")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	f.BoolVar(&anyType, "any-type", false, "allow an event type the CLI does not know, with any JSON payload")
	return cmd
}

// emitRegistry is the registry an emit of eventType checks against: the
// demo events, whose payloads are checked strictly; with anyType, for any
// other valid type name, a registry of that type alone with a raw JSON
// payload.
func emitRegistry(eventType string, anyType bool) (*events.Registry, error) {
	demoReg := demoevents.Registry()
	if _, err := demoReg.Lookup(eventType); err == nil || !anyType {
		return demoReg, nil // an unknown type is refused by ValidateJSON, naming it
	}
	if eventType == "" {
		return nil, usagef("EVENT_TYPE must not be empty")
	}
	if err := events.ValidateEventName(eventType); err != nil {
		return nil, usagef("%v", err)
	}
	reg, err := events.NewRegistry(events.Define[json.RawMessage](eventType, nil))
	if err != nil {
		return nil, usagef("%v", err)
	}
	return reg, nil
}

func emitPreview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
