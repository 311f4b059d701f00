package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newStatsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count jobs by state and queue and show the oldest available job's age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := client.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			fmt.Fprintf(a.stdout, "jobs: %d\n", st.Total)
			for _, s := range validStates {
				if n := st.ByState[s]; n > 0 {
					fmt.Fprintf(a.stdout, "  %-10s %d\n", s, n)
				}
			}
			if st.OldestAvailableAt != nil {
				age := time.Duration(st.OldestAvailableAgeSeconds * float64(time.Second)).Round(time.Millisecond)
				fmt.Fprintf(a.stdout, "oldest available job waiting: %s\n", age)
			} else {
				fmt.Fprintln(a.stdout, "oldest available job waiting: none available")
			}
			if len(st.ByQueue) > 0 {
				fmt.Fprintln(a.stdout)
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tSTATE\tCOUNT")
				for _, qc := range st.ByQueue {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", qc.Queue, qc.State, qc.Count)
				}
				return tw.Flush()
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
