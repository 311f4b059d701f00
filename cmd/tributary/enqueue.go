package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/riverqueue/river/rivertype"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/strictjson"
	"github.com/tributary-run/tributary/queue"
)

func newEnqueueCmd(a *app) *cobra.Command {
	var (
		queueName   string
		priority    int
		in          time.Duration
		at          string
		maxAttempts int
		unique      bool
		anyKind     bool
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND JSON",
		Short: "Insert one job",
		Long: `Insert one job of KIND with JSON arguments. KIND must be a kind the
tributary worker knows (` + strings.Join(demojobs.Kinds(), ", ") + `) unless --any-kind is
given, for jobs worked by your own service. The arguments must have one
reading: no object repeats a key, and a known kind's keys match its fields
exactly (the rule emit applies to payloads). JSON "-" reads the arguments
from stdin.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, raw := args[0], []byte(args[1])
			if args[1] == "-" {
				// Arguments can be bigger than one command-line argument may
				// be (128 KiB on Linux): read them from stdin, as emit does.
				in, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
				if err != nil {
					return fmt.Errorf("error reading the arguments from stdin: %w", err)
				}
				raw = in
			}
			if err := nonEmptyArg("KIND", kind); err != nil {
				return err
			}
			if strings.ContainsFunc(kind, unicode.IsSpace) {
				return usagef("KIND %q must not contain spaces", kind)
			}
			if !json.Valid(raw) {
				return usagef("arguments %q are not valid JSON", emitPreview(string(raw), 60))
			}
			known, err := demojobs.ValidateArgs(kind, raw)
			if err != nil {
				return usagef("%v", err)
			}
			if !known && !anyKind {
				return usagef("unknown job kind %q: the worker knows %s (use --any-kind for kinds of your own service)", kind, strings.Join(demojobs.Kinds(), ", "))
			}
			if !known {
				// The arguments' type is your service's, unknown here: the
				// part of the rule that needs no type applies, as to emit
				// --any-type's payloads: no object repeats a key, so every
				// decoder reads the same values.
				if err := strictjson.CheckNames(raw, reflect.TypeFor[json.RawMessage]()); err != nil {
					return usagef("arguments for %s: %v", kind, err)
				}
			}
			// What River's table would refuse (a \u0000 in the JSON, an
			// empty kind) is a usage error, found before connecting.
			if err := queue.CheckArgs(queue.RawArgs{KindName: kind, JSON: raw}); err != nil {
				return usagef("%v", err)
			}
			if priority < 1 || priority > 4 {
				return usagef("priority %d is out of range: want 1 (first) to 4 (last)", priority)
			}
			if maxAttempts < 1 {
				return usagef("--max-attempts %d must be at least 1", maxAttempts)
			}
			opts := &queue.EnqueueOpts{Queue: queueName, Priority: priority, MaxAttempts: maxAttempts, Unique: unique}
			switch {
			case in != 0 && at != "":
				return usagef("give --in or --at, not both")
			case in < 0:
				return usagef("--in %s must not be negative", in)
			case in > 0:
				opts.ScheduledAt = time.Now().Add(in)
			case at != "":
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return usagef("--at %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", at)
				}
				opts.ScheduledAt = t
			}
			if queueName == "" || strings.ContainsAny(queueName, " \t") {
				return usagef("invalid --queue %q", queueName)
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := client.Enqueue(cmd.Context(), queue.RawArgs{KindName: kind, JSON: raw}, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"id": res.Job.ID, "kind": res.Job.Kind, "queue": res.Job.Queue, "state": res.Job.State, "duplicate": res.UniqueSkippedAsDuplicate})
			}
			if res.UniqueSkippedAsDuplicate {
				fmt.Fprintf(a.stdout, "job %d already exists (unique), nothing inserted\n", res.Job.ID)
				return nil
			}
			fmt.Fprintf(a.stdout, "enqueued job %d (%s) on queue %s, state %s\n", res.Job.ID, res.Job.Kind, res.Job.Queue, res.Job.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queueName, "queue", "default", "queue to insert into")
	f.IntVar(&priority, "priority", 1, "priority from 1 (first) to 4 (last)")
	f.DurationVar(&in, "in", 0, "run after this delay, e.g. 30s")
	f.StringVar(&at, "at", "", "run at this RFC 3339 time")
	f.IntVar(&maxAttempts, "max-attempts", 25, "attempts before the job is discarded")
	f.BoolVar(&unique, "unique", false, "skip the insert while a job of the same kind and args exists")
	f.BoolVar(&anyKind, "any-kind", false, "allow a kind the tributary worker does not know")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// validStates returns River's job states, for --state.
func validStates() []string {
	var states []string
	for _, s := range rivertype.JobStates() {
		states = append(states, string(s))
	}
	return states
}

func checkState(s string) error {
	if !slices.Contains(validStates(), s) {
		return usagef("unknown --state %q: want one of %s", s, strings.Join(validStates(), ", "))
	}
	return nil
}
