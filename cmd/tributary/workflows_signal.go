package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// newWorkflowsSignalCmd is `workflows signal ID NAME JSON`: it sends a
// signal to a workflow (by id or caller key), waking a task that waits for
// it. JSON that does not parse, an unknown workflow and a payload over
// workflow.SignalPayloadMaxBytes are usage errors (exit 2) naming the value.
func newWorkflowsSignalCmd(a *app) *cobra.Command {
	var (
		key    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "signal ID NAME JSON",
		Short: "Send the signal NAME with the JSON payload to workflow ID (an id or caller key), waking a task that awaits it",
		Long: `Send the signal NAME with the JSON payload to workflow ID (an id or caller key).
A task waiting for NAME (workflow.AwaitSignal) resumes at once; a signal sent
before a task waits is kept for it. --key makes the send idempotent: a second
send with the same key does nothing. Invalid JSON or an unknown workflow is a
usage error (exit 2).`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, raw := args[1], args[2]
			if !json.Valid([]byte(raw)) {
				return usagef("invalid JSON payload %.80q for signal %q", raw, name)
			}
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				return a.sendSignal(cmd, wfc, ref, name, json.RawMessage(raw), key, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "idempotency key: a second send with it does nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// sendSignal sends one signal and prints what happened; a refusal that
// changed nothing (unknown workflow, a limit, a bad name) is a usage error.
func (a *app) sendSignal(cmd *cobra.Command, wfc *workflow.Client, ref, name string, payload json.RawMessage, key string, asJSON bool) error {
	res, err := wfc.Signal(cmd.Context(), ref, name, payload, &workflow.SignalOpts{IdempotencyKey: key})
	var nf *workflow.NotFoundError
	var le *workflow.LimitError
	switch {
	case errors.As(err, &nf):
		return usagef("unknown workflow %q: no workflow has that id or key", ref)
	case errors.As(err, &le):
		return usagef("%v", err)
	case errors.Is(err, workflow.ErrInvalidSignal):
		return usagef("%v", err)
	case err != nil:
		return err
	}
	if asJSON {
		return a.printJSON(res)
	}
	switch {
	case res.Duplicate:
		fmt.Fprintf(a.stdout, "signal %q to workflow %s: already sent with key %q, nothing done\n", name, res.WorkflowID, key)
	default:
		fmt.Fprintf(a.stdout, "signal %q sent to workflow %s (signal %d, %d waiting task(s) woken)\n", name, res.WorkflowID, res.SignalID, res.Woken)
	}
	return nil
}
