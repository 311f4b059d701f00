package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// newWorkflowsCmd groups the workflow commands: list, show, cancel, retry
// and start (by a registered name: the demo workflows).
func newWorkflowsCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "workflows",
		Short: "List, show, cancel, retry, fork, start, signal or wait for workflows",
	})
	cmd.AddCommand(
		newWorkflowsListCmd(a),
		newWorkflowsShowCmd(a),
		newWorkflowsCancelCmd(a),
		newWorkflowsRetryCmd(a),
		newWorkflowsStartCmd(a),
		newWorkflowsSignalCmd(a),
		newWorkflowsWaitCmd(a),
		newWorkflowsForkCmd(a),
		newWorkflowsArchivedCmd(a),
	)
	return cmd
}

// workflowClient connects and returns a workflow client; the caller closes
// the pool with the returned func.
func (a *app) workflowClient(cmd *cobra.Command) (*workflow.Client, func(), error) {
	client, pool, err := a.client(cmd.Context())
	if err != nil {
		return nil, nil, err
	}
	return workflow.NewClient(client), pool.Close, nil
}

// workflowRef rejects an empty ID|KEY argument.
func workflowRef(args []string) (string, error) {
	if err := nonEmptyArg("ID|KEY", args[0]); err != nil {
		return "", err
	}
	return args[0], nil
}

// withWorkflow checks the ID|KEY argument (args[0]), connects, and runs fn
// with a workflow client and the reference; the pool closes after fn.
func (a *app) withWorkflow(cmd *cobra.Command, args []string, fn func(wfc *workflow.Client, ref string) error) error {
	ref, err := workflowRef(args)
	if err != nil {
		return err
	}
	wfc, done, err := a.workflowClient(cmd)
	if err != nil {
		return err
	}
	defer done()
	return fn(wfc, ref)
}

// workflowActionError turns an operator action's refusal (nothing changed)
// into a usage error; other errors stay runtime failures.
func workflowActionError(err error) error {
	var nf *workflow.NotFoundError
	switch {
	case errors.As(err, &nf):
		return err
	case errors.Is(err, workflow.ErrFinished), errors.Is(err, workflow.ErrNothingToRetry), errors.Is(err, workflow.ErrTaskActive):
		return usagef("%v", err)
	}
	return err
}

func newWorkflowsListCmd(a *app) *cobra.Command {
	var statuses, attrs []string
	var name, after string
	var limit int
	var asJSON, withCounts bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows, newest first, with their task counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := workflow.ListParams{Name: name, After: after, Limit: limit}
			for _, s := range statuses {
				st, err := workflow.ParseStatus(s)
				if err != nil {
					return usagef("invalid --status: %v", err)
				}
				p.Statuses = append(p.Statuses, st)
			}
			if limit < 1 || limit > workflow.ListLimitMax {
				return usagef("--limit %d is out of range: want 1 to %d", limit, workflow.ListLimitMax)
			}
			if after != "" {
				if _, err := uuid.Parse(after); err != nil {
					return usagef("invalid --after %q: want a workflow id", after)
				}
			}
			if name != "" {
				if err := queue.CheckText(name); err != nil {
					return usagef("invalid --name %q: %v", name, err)
				}
			}
			var err error
			if p.Attributes, err = parseAttrFlags(attrs); err != nil {
				return err
			}
			wfc, done, err := a.workflowClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := wfc.List(cmd.Context(), p)
			if errors.Is(err, workflow.ErrInvalidAttribute) || errors.Is(err, workflow.ErrLimit) {
				return usagef("invalid --attr: %v", err)
			}
			if err != nil {
				return err
			}
			var counts map[workflow.Status]queue.Count
			if withCounts {
				if counts, err = wfc.CountByStatus(cmd.Context(), p, workflowCountCap); err != nil {
					return err
				}
			}
			if asJSON {
				if withCounts {
					return a.printJSON(struct {
						*workflow.ListResult
						Counts map[workflow.Status]queue.Count `json:"counts"`
					}{res, counts})
				}
				return a.printJSON(res)
			}
			if withCounts {
				fmt.Fprintln(a.stdout, statusCountsLine(counts))
			}
			return printWorkflows(a.stdout, res)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&statuses, "status", nil, "only workflows in these statuses ("+joinStatuses()+")")
	f.StringVar(&name, "name", "", "only workflows of this name")
	f.StringArrayVar(&attrs, "attr", nil, "only workflows with this attribute, key=value (repeat: all of them)")
	f.BoolVar(&withCounts, "counts", false, fmt.Sprintf("also count the matching workflows per status (the newest %d)", workflowCountCap))
	f.StringVar(&after, "after", "", "continue after this workflow id (the last one listed)")
	f.IntVar(&limit, "limit", workflow.ListLimitDefault, fmt.Sprintf("at most this many workflows (up to %d)", workflow.ListLimitMax))
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func joinStatuses() string {
	var s []string
	for _, st := range workflow.Statuses() {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

func printWorkflows(w io.Writer, res *workflow.ListResult) error {
	if len(res.Workflows) == 0 {
		_, err := fmt.Fprintln(w, "no workflows")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tNAME\tSTATUS\tTASKS\tCOUNTS\tCREATED")
	for _, s := range res.Workflows {
		key := s.Key
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, key, s.Name, s.Status, s.TaskCount, countsLine(s.Counts), s.CreatedAt.Local().Format(time.DateTime))
	}
	if res.Next != "" {
		fmt.Fprintf(tw, "more: --after %s\n", res.Next)
	}
	return tw.Flush()
}

// countsLine writes the non-zero task counts: "completed 5, failed 1".
func countsLine(c workflow.Counts) string {
	var parts []string
	for _, p := range []struct {
		name string
		n    int
	}{{"pending", c.Pending}, {"active", c.Active}, {"completed", c.Completed}, {"failed", c.Failed}, {"cancelled", c.Cancelled}, {"skipped", c.Skipped}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p.name, p.n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func newWorkflowsShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID|KEY",
		Short: "Show a workflow and every task: state, attempts, output, errors and what it waits on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				d, err := wfc.Get(cmd.Context(), ref)
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(d)
				}
				return printWorkflow(a.stdout, d)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func printWorkflow(w io.Writer, d *workflow.Details) error {
	fmt.Fprintf(w, "workflow %s\n", d.ID)
	if d.Key != "" {
		fmt.Fprintf(w, "  key:      %s\n", d.Key)
	}
	fmt.Fprintf(w, "  name:     %s\n  status:   %s\n  tasks:    %d (%s)\n  created:  %s\n",
		d.Name, d.Status, d.TaskCount, countsLine(d.Counts), d.CreatedAt.Format(time.RFC3339))
	if d.FinishedAt != nil {
		fmt.Fprintf(w, "  finished: %s\n", d.FinishedAt.Format(time.RFC3339))
	}
	if len(d.Input) > 0 && string(d.Input) != "null" {
		fmt.Fprintf(w, "  input:    %s\n", oneLine(string(d.Input), 200))
	}
	if len(d.Attributes) > 0 {
		fmt.Fprintf(w, "  attrs:    %s\n", attributesLine(d.Attributes))
	}
	if d.Origin != nil {
		fmt.Fprintf(w, "  forked:   from %s at task %s\n", d.Origin.WorkflowID, d.Origin.Task)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tJOB\tATTEMPTS\tDETAIL")
	for _, t := range d.Tasks {
		job := fmt.Sprint(t.JobID)
		if t.JobState != "" {
			job += " (" + string(t.JobState) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t.Name, t.State, job, t.Attempts, taskDetail(t))
	}
	return tw.Flush()
}

// taskDetail is the one line that says most about a task: what a pending
// one waits on, a failed one's last error, a completed one's output.
func taskDetail(t workflow.TaskInfo) string {
	var parts []string
	if len(t.WaitingOn) > 0 {
		parts = append(parts, "waiting on: "+strings.Join(t.WaitingOn, ", "))
	}
	if w := t.WaitingFor; w != nil {
		wait := fmt.Sprintf("waits for %s %q", w.Kind, w.Name)
		if w.Until != nil {
			wait += " until " + w.Until.UTC().Format(time.RFC3339)
		}
		parts = append(parts, wait)
	}
	if len(t.Output) > 0 {
		parts = append(parts, "output: "+oneLine(string(t.Output), 80))
	}
	if n := len(t.Errors); n > 0 && t.State != workflow.TaskCompleted {
		e := t.Errors[n-1]
		parts = append(parts, fmt.Sprintf("error (run %d, attempt %d): %s", e.Run, e.Attempt, oneLine(e.Error, 100)))
	}
	return strings.Join(parts, "; ")
}

func newWorkflowsCancelCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel ID|KEY",
		Short: "Cancel a running workflow: pending tasks never start, running ones have their context cancelled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				res, err := wfc.Cancel(cmd.Context(), ref)
				if err != nil {
					return workflowActionError(err)
				}
				if asJSON {
					return a.printJSON(res)
				}
				fmt.Fprintf(a.stdout, "workflow %s cancelled: %d tasks cancelled, %d running jobs interrupted\n", res.ID, res.Cancelled, res.Interrupted)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newWorkflowsRetryCmd(a *app) *cobra.Command {
	var mode string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retry ID|KEY",
		Short: "Run tasks of a workflow again: failed ones, failed ones and everything after them, or all",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := workflow.ParseRetryMode(mode)
			if err != nil {
				return usagef("invalid --mode: %v", err)
			}
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				res, err := wfc.Retry(cmd.Context(), ref, m)
				if err != nil {
					return workflowActionError(err)
				}
				if asJSON {
					return a.printJSON(res)
				}
				fmt.Fprintf(a.stdout, "workflow %s retried (%s): %d tasks run again: %s\n", res.ID, res.Mode, len(res.Tasks), oneLine(strings.Join(res.Tasks, ", "), 200))
				return nil
			})
		},
	}
	var modes []string
	for _, m := range workflow.RetryModes() {
		modes = append(modes, string(m))
	}
	cmd.Flags().StringVar(&mode, "mode", string(workflow.RetryFailed), "which tasks run again: "+strings.Join(modes, ", "))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// workflowRegistry is the registry of workflows the CLI can start by name.
func workflowRegistry() (*workflow.Registry, error) { return demoworkflows.NewRegistry() }

func newWorkflowsStartCmd(a *app) *cobra.Command {
	var key string
	var attrs []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "start NAME JSON",
		Short: "Start a registered workflow (demo.fanout, demo.chain) with JSON input; JSON - reads stdin",
		Long: `Start a workflow registered under NAME, built from the JSON input (give -
to read it from stdin). The worker works its tasks. With --id KEY the start
is idempotent: when a workflow with KEY exists, it is shown instead and
nothing is inserted; an empty KEY is a usage error.

  tributary workflows start demo.fanout '{"width":5,"fail":1}'
  tributary workflows start demo.chain '{"length":20}' --id chain-1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := nonEmptyArg("NAME", name); err != nil {
				return err
			}
			// An empty --id given on purpose is a usage error, as an empty
			// NAME is: left out, the workflow starts without a key.
			if cmd.Flags().Changed("id") {
				if err := nonEmptyArg("--id", key); err != nil {
					return err
				}
			}
			raw := []byte(args[1])
			if args[1] == "-" {
				var err error
				if raw, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1)); err != nil {
					return fmt.Errorf("error reading the input from stdin: %w", err)
				}
				if len(raw) > 1<<20 {
					return usagef("the input on stdin is larger than 1 MiB")
				}
				raw = bytes.TrimSpace(raw)
			}
			if !json.Valid(raw) {
				return usagef("input %q is not valid JSON", oneLine(string(raw), 60))
			}
			if err := queue.CheckJSONB(raw); err != nil {
				return usagef("input: %v", err)
			}
			reg, err := workflowRegistry()
			if err != nil {
				return err
			}
			opts := &workflow.Opts{ID: key, OnConflict: workflow.ConflictReturnExisting}
			if opts.Attributes, err = parseAttrFlags(attrs); err != nil {
				return err
			}
			// Built before connecting: a bad name or input is a usage error
			// whatever the database.
			if _, err := reg.Build(name, raw, opts); err != nil {
				return usagef("%v", err)
			}
			wfc, done, err := a.workflowClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := wfc.Start(cmd.Context(), reg, name, raw, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(res)
			}
			if res.Existing {
				fmt.Fprintf(a.stdout, "workflow %s with key %s exists (%s); nothing started\n", res.ID, res.Key, res.Status)
				return nil
			}
			fmt.Fprintf(a.stdout, "workflow %s started (%s, %d tasks)\n", res.ID, name, len(res.Jobs))
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "id", "", "the workflow's key (idempotent start: an existing workflow with it is returned)")
	cmd.Flags().StringArrayVar(&attrs, "attr", nil, "an attribute of the workflow, key=value (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
