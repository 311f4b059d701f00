package limits

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Limit caps the jobs of Kind in Queue (empty: any), across every process:
// at most Max of them running (or available, about to run) at a time, and,
// with Rate, at most Rate starts (by weight) in any Period. Both apply per
// partition key when KeyArg is set or the args implement Keyer; Total caps
// all keys together, served round-robin. A job is
// governed by the first limit of Config.Limits that matches its kind and
// queue, or by the one it names (a workflow task's TaskOpts.Limit, which
// may also give its key: TaskOpts.LimitKey).
type Limit struct {
	// Name identifies the limit in tributary_limit, in `tributary limits`
	// and in logs: 1 to 100 letters, digits, '_', '-', '.' or ':'.
	// Required. An event consumer's cap is the limit "consumer:<name>"
	// (events.ConsumerConfig.MaxHandlers).
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
	// Max is how many of the limit's jobs (per key) may run at once.
	// `tributary limits set` overrides it at run time. Defaults to no cap
	// when Total or Rate is given; required (at least 1) otherwise.
	Max int
	// Total caps the limit's jobs running at once over all its keys (0:
	// no such cap). Its free slots go round-robin across the keys with
	// jobs waiting, one job per key per round, so a key with a large
	// backlog holds back the others by at most one round: a fair queue is
	// a Total with a KeyArg (such as a tenant id). Defaults to none.
	Total int
	// Rate is how many starts of the limit's jobs (per key), counted by
	// weight, any Period may hold. Defaults to none.
	Rate int
	// Period is the window of Rate, at least 1 ms. Defaults to 1 second.
	Period time.Duration
	// WeightArg names a top-level integer field of the args that is the
	// job's weight against Rate, 1 to Rate (missing: 1). Args implementing
	// Weigher give their weight instead. Defaults to every job weighing 1.
	WeightArg string
	// OnBusy is what a job does when its key has no free slot: wait
	// (BusyQueue), or BusyCancelNewest, or BusyCancelRunning; the
	// cancelling ones need a Max. Defaults to BusyQueue.
	OnBusy Busy
}

// Weigher is implemented by job args that give their weight against a
// rate limit themselves, instead of Limit.WeightArg.
type Weigher interface {
	LimitWeight() int
}

// PeriodDefault is the window of a rate limit that gives none.
const PeriodDefault = time.Second

// Keyer is implemented by job args that choose their partition key
// themselves, at insert, instead of Limit.KeyArg.
type Keyer interface {
	LimitKey() string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)

// workflowKeyMaxLen is the longest workflow concurrency key
// (workflow.NameMaxLen).
const workflowKeyMaxLen = 200

// ValidateName reports whether name may name a limit: a declared one, or
// a workflow concurrency key's ("workflow:" and the key: 1 to 200
// characters, none a control character).
func ValidateName(name string) error {
	if key, ok := strings.CutPrefix(name, WorkflowPrefix); ok {
		if key == "" || len(key) > workflowKeyMaxLen || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("limit name %q: want %q and a workflow concurrency key of 1 to %d characters, none a control character", name, WorkflowPrefix, workflowKeyMaxLen)
		}
		return nil
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("limit name %q: want 1 to 100 letters, digits, '_', '-', '.' or ':'", name)
	}
	return nil
}

// Validate checks one limit: its name, Max and KeyArg.
func (l Limit) Validate() error {
	if strings.HasPrefix(l.Name, WorkflowPrefix) {
		return fmt.Errorf("limit name %q: the prefix %q names workflow concurrency keys' limits (workflow.Opts.ConcurrencyKey)", l.Name, WorkflowPrefix)
	}
	if err := ValidateName(l.Name); err != nil {
		return err
	}
	switch {
	case l.Max < 0 || l.Total < 0 || l.Rate < 0:
		return fmt.Errorf("limit %q: Max %d, Total %d and Rate %d must not be negative", l.Name, l.Max, l.Total, l.Rate)
	case l.Max == 0 && l.Total == 0 && l.Rate == 0:
		return fmt.Errorf("limit %q: Max %d must be at least 1 (or give a Total or a Rate)", l.Name, l.Max)
	case l.Period < 0 || (l.Period > 0 && l.Period < time.Millisecond):
		return fmt.Errorf("limit %q: Period %s must be at least 1ms", l.Name, l.Period)
	case l.WeightArg != "" && l.Rate == 0:
		return fmt.Errorf("limit %q: WeightArg %q needs a Rate", l.Name, l.WeightArg)
	}
	if err := l.OnBusy.validate(l); err != nil {
		return err
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

// period is the limit's rate window, 0 without a rate.
func (l Limit) period() time.Duration {
	if l.Rate == 0 {
		return 0
	}
	return cmp.Or(l.Period, PeriodDefault)
}

// weight is a job's weight against l's rate: Weigher's, else the
// WeightArg field of its encoded args, else 1; it must be 1 to Rate.
func (l Limit) weight(args any, encoded []byte) (int, error) {
	w := 1
	if wr, ok := args.(Weigher); ok {
		w = wr.LimitWeight()
	} else if l.WeightArg != "" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(encoded, &fields); err != nil {
			return 0, fmt.Errorf("limit %q: reading WeightArg %q of the args: %w", l.Name, l.WeightArg, err)
		}
		if raw, ok := fields[l.WeightArg]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &w); err != nil {
				return 0, fmt.Errorf("limit %q: WeightArg %q of the args is %s, not a whole number", l.Name, l.WeightArg, raw)
			}
		}
	}
	if l.Rate > 0 && (w < 1 || w > l.Rate) {
		return 0, fmt.Errorf("limit %q: weight %d must be 1 to the limit's Rate %d", l.Name, w, l.Rate)
	}
	return w, nil
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
