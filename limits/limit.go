package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Limit caps how many jobs run at once, across every process: the jobs of
// Kind in Queue (empty: any), at most Max of them running (or available,
// about to run) at a time, or at most Max per partition key when KeyArg is
// set or the args implement Keyer. A job is governed by the first limit of
// Config.Limits that matches its kind and queue.
type Limit struct {
	// Name identifies the limit in tributary_limit, in `tributary limits`
	// and in logs: 1 to 100 letters, digits, '_', '-' or '.'. Required.
	Name string
	// Kind limits the jobs of this kind. Defaults to any kind.
	Kind string
	// Queue limits the jobs inserted into this queue. Defaults to any queue.
	Queue string
	// KeyArg partitions the limit by the value of this top-level field of
	// the job's JSON args: Max applies per value. A job without the field
	// has the empty key. Args implementing Keyer give their key instead.
	// Defaults to no partition (one key).
	KeyArg string
	// Max is how many of the limit's jobs (per key) may run at once, at
	// least 1. `tributary limits set` overrides it at run time.
	Max int
}

// Keyer is implemented by job args that choose their partition key
// themselves, at insert, instead of Limit.KeyArg.
type Keyer interface {
	LimitKey() string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// ValidateName reports whether name may name a limit.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("limit name %q: want 1 to 100 letters, digits, '_', '-' or '.'", name)
	}
	return nil
}

// Validate checks one limit: its name, Max and KeyArg.
func (l Limit) Validate() error {
	if err := ValidateName(l.Name); err != nil {
		return err
	}
	if l.Max < 1 {
		return fmt.Errorf("limit %q: Max %d must be at least 1", l.Name, l.Max)
	}
	if strings.TrimSpace(l.KeyArg) != l.KeyArg {
		return fmt.Errorf("limit %q: KeyArg %q has surrounding spaces", l.Name, l.KeyArg)
	}
	return nil
}

// matches reports whether the limit governs a job of kind in queue.
func (l Limit) matches(kind, queue string) bool {
	return (l.Kind == "" || l.Kind == kind) && (l.Queue == "" || l.Queue == queue)
}

// key is a job's partition key under l: Keyer's, else the text of the
// KeyArg field of its encoded args (a string as it is, anything else as
// its JSON), else empty.
func (l Limit) key(args any, encoded []byte) (string, error) {
	if k, ok := args.(Keyer); ok {
		return k.LimitKey(), nil
	}
	if l.KeyArg == "" {
		return "", nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(encoded, &fields); err != nil {
		return "", fmt.Errorf("limit %q: reading KeyArg %q of the args: %w", l.Name, l.KeyArg, err)
	}
	raw, ok := fields[l.KeyArg]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	return string(raw), nil
}

// validateAll checks limits and that their names are unique.
func validateAll(limits []Limit) error {
	seen := map[string]bool{}
	var errs []error
	for _, l := range limits {
		if err := l.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[l.Name] {
			errs = append(errs, fmt.Errorf("limit %q is declared twice", l.Name))
		}
		seen[l.Name] = true
	}
	return errors.Join(errs...)
}
