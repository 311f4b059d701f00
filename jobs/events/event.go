package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/tributary-run/tributary/internal/strictjson"
)

// EventKind says whom an event is for: domain events stay inside the
// service that emitted them, integration events are meant for other
// services. (Not to be confused with a River job's kind, its type name.)
type EventKind string

// Event kinds.
const (
	EventKindDomain      EventKind = "domain"
	EventKindIntegration EventKind = "integration"
)

// Validator is implemented by payload types that check their own values.
// Validate is called at emit time and again before a handler runs; an error
// there is terminal for the dispatch (it is not retried).
type Validator interface {
	Validate() error
}

// Definition is an event type as the registry, the emitter and the
// dispatcher see it, whatever its payload type. Event[T] implements it.
type Definition interface {
	// Name is the event type, such as "order.placed".
	Name() string
	// Version is the payload schema version. Defaults to 1.
	Version() int
	// EventKind is EventKindDomain (the default) or EventKindIntegration.
	EventKind() EventKind

	payloadType() reflect.Type
	decode(raw []byte) (any, error)
}

// Event is a typed event definition: a name, a version, a kind and the Go
// type of its payload. Define one per event type at package level of the
// code that owns it and share it between producers and consumers.
type Event[T any] struct {
	name    string
	version int
	kind    EventKind
}

// EventOpts are the optional parts of an event definition.
type EventOpts struct {
	// Version of the payload schema. Defaults to 1.
	Version int
	// EventKind of the event. Defaults to EventKindDomain.
	EventKind EventKind
}

var eventNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$`)

// Define returns the definition of event type name with payload type T.
// It panics on a malformed name or kind, like regexp.MustCompile: a
// definition is written once in code, not read from input.
func Define[T any](name string, opts *EventOpts) Event[T] {
	if err := ValidateEventName(name); err != nil {
		panic(err)
	}
	ev := Event[T]{name: name, version: 1, kind: EventKindDomain}
	if opts != nil {
		if opts.Version > 0 {
			ev.version = opts.Version
		}
		if opts.EventKind != "" {
			if opts.EventKind != EventKindDomain && opts.EventKind != EventKindIntegration {
				panic(fmt.Sprintf("events: invalid kind %q for event %q: want domain or integration", opts.EventKind, name))
			}
			ev.kind = opts.EventKind
		}
	}
	return ev
}

// ValidateEventName checks an event type name: letters, digits and
// ". _ : -", at most 200 characters, no wildcard.
func ValidateEventName(name string) error {
	if !eventNameRE.MatchString(name) {
		return fmt.Errorf("invalid event type %q: use letters, digits and . _ : - (at most 200 characters)", name)
	}
	return nil
}

// Name returns the event type.
func (e Event[T]) Name() string { return e.name }

// Version returns the payload schema version.
func (e Event[T]) Version() int { return e.version }

// EventKind returns the event kind.
func (e Event[T]) EventKind() EventKind { return e.kind }

func (e Event[T]) payloadType() reflect.Type { return reflect.TypeFor[T]() }

func (e Event[T]) decode(raw []byte) (any, error) {
	var v T
	if err := decodeStrict(raw, &v); err != nil {
		return nil, fmt.Errorf("payload of %s does not fit %s: %w", e.name, reflect.TypeFor[T](), err)
	}
	if err := validate(&v); err != nil {
		return nil, fmt.Errorf("payload of %s is invalid: %w", e.name, err)
	}
	return v, nil
}

// validate calls Validate on v or *v when the type has it.
func validate(ptr any) error {
	if val, ok := ptr.(Validator); ok {
		return val.Validate()
	}
	if val, ok := reflect.ValueOf(ptr).Elem().Interface().(Validator); ok {
		return val.Validate()
	}
	return nil
}

// decodeStrict decodes one JSON value into dst, rejecting unknown object
// fields, values of the wrong type, trailing data, a key repeated in any
// object, and a key that matches a struct field only when case is ignored
// ("Order_ID" for `json:"order_id"`). encoding/json accepts the last two,
// keeping the last of repeated keys and folding case; other decoders keep
// the first key, refuse, or match case exactly, so the same payload could
// read differently in another consumer. Map keys are free; types with
// their own UnmarshalJSON name their own fields.
func decodeStrict(raw []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return strictjson.CheckNamesDecoded(raw, reflect.TypeOf(dst))
}

// ErrUnknownEventType is returned (wrapped, with the name) for an event type
// the registry does not hold.
var ErrUnknownEventType = errors.New("unknown event type")

// Registry is the set of event types an emitter accepts. It is immutable
// once built and safe for concurrent use.
type Registry struct {
	defs map[string]Definition
}

// NewRegistry returns a registry of defs. Two definitions with one name are
// an error.
func NewRegistry(defs ...Definition) (*Registry, error) {
	r := &Registry{defs: make(map[string]Definition, len(defs))}
	for _, d := range defs {
		if _, dup := r.defs[d.Name()]; dup {
			return nil, fmt.Errorf("event type %q is defined twice", d.Name())
		}
		r.defs[d.Name()] = d
	}
	return r, nil
}

// Lookup returns the definition of an event type.
func (r *Registry) Lookup(name string) (Definition, error) {
	d, ok := r.defs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %s)", ErrUnknownEventType, name, strings.Join(r.Names(), ", "))
	}
	return d, nil
}

// Names lists the registered event types in order.
func (r *Registry) Names() []string {
	return slices.Sorted(maps.Keys(r.defs))
}

// matchPattern reports whether an event type matches a subscription
// pattern: the exact name, "prefix.*" for every type starting with
// "prefix.", or "*" for every type.
func matchPattern(pattern, eventType string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, ".*"):
		return strings.HasPrefix(eventType, strings.TrimSuffix(pattern, "*"))
	default:
		return pattern == eventType
	}
}

// validatePattern checks a subscription pattern.
func validatePattern(p string) error {
	if p == "*" {
		return nil
	}
	if err := ValidateEventName(strings.TrimSuffix(p, ".*")); err != nil {
		return fmt.Errorf("invalid subscription pattern %q: want an event type, prefix.* or *", p)
	}
	return nil
}
