package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func newWorkflowsForkCmd(a *app) *cobra.Command {
	var from string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork ID|KEY --from TASK",
		Short: "Start a new workflow with the same graph, running again from TASK (earlier tasks keep their outputs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyArg("--from", from); err != nil {
				return err
			}
			return a.withWorkflow(cmd, args, func(wfc *workflow.Client, ref string) error {
				res, err := wfc.Fork(cmd.Context(), ref, from)
				if errors.Is(err, workflow.ErrUnknownTask) || errors.Is(err, workflow.ErrTaskActive) {
					return usagef("%v", err)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(res)
				}
				tasks := slices.Sorted(maps.Keys(res.Jobs))
				_, err = fmt.Fprintf(a.stdout, "workflow %s forked from %s at %s; running again: %s\n", res.ID, ref, from, strings.Join(tasks, ", "))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the task to run again, with every task after it (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
