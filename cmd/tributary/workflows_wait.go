package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// Exit codes of `workflows wait` beyond the CLI's 0, 1 and 2.
const (
	exitWorkflowFailed    = 3
	exitWorkflowCancelled = 4
	exitWaitTimeout       = 5
)

// exitCodeError is an error with an exit code of its own.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

func newWorkflowsWaitCmd(a *app) *cobra.Command {
	var timeout time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "wait ID|KEY",
		Short: "Wait until a workflow ends and print its outcome (exit 0 completed, 3 failed, 4 cancelled, 5 timed out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("invalid --timeout %s: want a positive duration, or 0 for none", timeout)
			}
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				ctx := cmd.Context()
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				o, err := wfc.Await(ctx, ref)
				if errors.Is(err, context.DeadlineExceeded) {
					return &exitCodeError{code: exitWaitTimeout, err: fmt.Errorf("workflow %s did not end within %s", ref, timeout)}
				}
				if err != nil {
					return err
				}
				if asJSON {
					err = a.printJSON(o)
				} else {
					err = printOutcome(a.stdout, o)
				}
				if err != nil {
					return err
				}
				switch o.Status {
				case workflow.StatusFailed:
					return &exitCodeError{code: exitWorkflowFailed, err: &workflow.OutcomeError{Outcome: o}}
				case workflow.StatusCancelled:
					return &exitCodeError{code: exitWorkflowCancelled, err: &workflow.OutcomeError{Outcome: o}}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 5); 0 waits until the workflow ends")
	f.BoolVar(&asJSON, "json", false, "print the outcome as one JSON document")
	return cmd
}

func printOutcome(w io.Writer, o *workflow.Outcome) error {
	fmt.Fprintf(w, "id:       %s\n", o.ID)
	if o.Key != "" {
		fmt.Fprintf(w, "key:      %s\n", o.Key)
	}
	fmt.Fprintf(w, "name:     %s\nstatus:   %s\nfinished: %s\n", o.Name, o.Status, o.FinishedAt.Local().Format(time.DateTime))
	for name, msg := range o.Failed {
		fmt.Fprintf(w, "failed:   %s: %s\n", name, msg)
	}
	for _, t := range o.Final {
		out := "-"
		if t.Output != nil {
			out = string(t.Output)
		}
		if _, err := fmt.Fprintf(w, "%s (%s): %s\n", t.Name, t.State, out); err != nil {
			return err
		}
	}
	return nil
}
