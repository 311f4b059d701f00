package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/scheduler"
)

func newSchedulesBackfillCmd(a *app) *cobra.Command {
	var fromFlag, toFlag string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backfill NAME --from TIME --to TIME",
		Short: "Insert the jobs a schedule would have fired from --from (included) to --to (excluded)",
		Long: fmt.Sprintf(`Insert the job of every fire time of the schedule's spec from --from
(included) to --to (excluded), RFC 3339 times, in one transaction. A fire
time that has a job already is left alone, so running it again inserts
nothing. A schedule that starts a workflow (workflow.StartArgs) starts one
run per fire time, whatever its overlap policy. At most %d fire times.

  tributary schedules backfill nightly-report --from 2026-12-01T00:00:00Z --to 2026-12-07T00:00:00Z`, scheduler.BackfillMax),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyArg("NAME", args[0]); err != nil {
				return err
			}
			from, err := time.Parse(time.RFC3339, fromFlag)
			if err != nil {
				return usagef("invalid --from %q: want an RFC 3339 time (2026-12-01T00:00:00Z)", fromFlag)
			}
			to, err := time.Parse(time.RFC3339, toFlag)
			if err != nil {
				return usagef("invalid --to %q: want an RFC 3339 time (2026-12-01T00:00:00Z)", toFlag)
			}
			if !from.Before(to) {
				return usagef("invalid range: --from %s is not before --to %s", fromFlag, toFlag)
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := scheduler.Backfill(cmd.Context(), client, args[0], from, to)
			if errors.Is(err, scheduler.ErrBackfillTooLong) {
				return usagef("%v", err)
			}
			if err != nil {
				return scheduleErr(args[0], err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			_, err = fmt.Fprintf(a.stdout, "schedule %s backfilled from %s to %s: %d jobs inserted, %d fire times had one\n",
				args[0], fromFlag, toFlag, res.Inserted, res.Existing)
			return err
		},
	}
	cmd.Flags().StringVar(&fromFlag, "from", "", "the first time of the range, RFC 3339 (required)")
	cmd.Flags().StringVar(&toFlag, "to", "", "the end of the range (excluded), RFC 3339 (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
