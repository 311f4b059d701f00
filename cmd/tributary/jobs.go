package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// jobView is a job as the CLI prints it.
type jobView struct {
	ID          int64                    `json:"id"`
	Kind        string                   `json:"kind"`
	Queue       string                   `json:"queue"`
	State       string                   `json:"state"`
	Priority    int                      `json:"priority"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	Args        json.RawMessage          `json:"args"`
	CreatedAt   time.Time                `json:"created_at"`
	ScheduledAt time.Time                `json:"scheduled_at"`
	AttemptedAt *time.Time               `json:"attempted_at,omitempty"`
	FinalizedAt *time.Time               `json:"finalized_at,omitempty"`
	Errors      []rivertype.AttemptError `json:"errors,omitempty"`
	Tags        []string                 `json:"tags,omitempty"`
}

func viewOf(j *rivertype.JobRow) jobView {
	return jobView{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: string(j.State), Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Args: json.RawMessage(j.EncodedArgs),
		CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt, AttemptedAt: j.AttemptedAt,
		FinalizedAt: j.FinalizedAt, Errors: j.Errors, Tags: j.Tags,
	}
}

func newJobsCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "jobs",
		Short: "List, show, retry, cancel or delete jobs",
	})
	cmd.AddCommand(newJobsListCmd(a), newJobsShowCmd(a))
	// The actions keep event lanes right (see events.RetryJob): cancelling
	// or deleting a lane's head moves its lane on, a retry never runs an
	// event ahead of its lane.
	for _, action := range []struct {
		name, short, done string
		fn                func(ctx context.Context, c *queue.Client, id int64) (*events.JobActionResult, error)
	}{
		{"retry", "Make jobs available to run again now (a dispatch waiting behind its lane's head is refused)", "retried", events.RetryJob},
		{"cancel", "Cancel jobs (a running job is cancelled when its worker checks its context); a lane's head moves its lane on", "cancelled", events.CancelJob},
		{"delete", "Delete jobs that are not running; a lane's head moves its lane on", "deleted", events.DeleteJob},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.name + " ID...",
			Short: action.short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				ids, err := parseIDs(args)
				if err != nil {
					return err
				}
				client, pool, err := a.client(cmd.Context())
				if err != nil {
					return err
				}
				defer pool.Close()
				var errs []error
				refused := 0
				for _, id := range ids {
					res, err := action.fn(cmd.Context(), client, id)
					var order *events.LaneOrderError
					switch {
					case errors.Is(err, river.ErrNotFound):
						errs = append(errs, fmt.Errorf("job %d not found", id))
					case errors.As(err, &order), errors.Is(err, events.ErrBlockingJobGone):
						refused++
						errs = append(errs, err)
					case err != nil:
						errs = append(errs, fmt.Errorf("job %d: %w", id, err))
					default:
						fmt.Fprintln(a.stdout, jobActionLine(id, action.done, res))
					}
				}
				err = errors.Join(errs...)
				if refused > 0 && refused == len(errs) {
					// Refused as asked, nothing changed: a usage error.
					return usagef("%v", err)
				}
				return err
			},
		})
	}
	return cmd
}

// jobActionLine says what an action on a job did, lanes included.
func jobActionLine(id int64, done string, res *events.JobActionResult) string {
	var b strings.Builder
	switch {
	case res.ReinsertedFrom != 0:
		fmt.Fprintf(&b, "job %d was deleted by River's retention; its event is back in its lane as job %d (state %s)", id, res.Job.ID, res.Job.State)
	case res.Requeued:
		fmt.Fprintf(&b, "job %d back in its lane, waiting for its turn (state %s)", id, res.Job.State)
	default:
		fmt.Fprintf(&b, "job %d %s (state %s)", id, done, res.Job.State)
	}
	if res.LaneReleased {
		fmt.Fprintf(&b, "; aggregate %s of consumer %s moved on to its next event", res.AggregateID, res.Consumer)
	}
	return b.String()
}

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, s := range args {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, usagef("invalid job id %q: want a positive integer", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func newJobsListCmd(a *app) *cobra.Command {
	var states, kinds, queues []string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10000 {
				return usagef("--limit %d is out of range: want 1 to 10000", limit)
			}
			params := river.NewJobListParams().First(limit).OrderBy(river.JobListOrderByID, river.SortOrderDesc)
			if len(states) > 0 {
				rs := make([]rivertype.JobState, 0, len(states))
				for _, s := range states {
					if err := checkState(s); err != nil {
						return err
					}
					rs = append(rs, rivertype.JobState(s))
				}
				params = params.States(rs...)
			}
			if len(kinds) > 0 {
				params = params.Kinds(kinds...)
			}
			if len(queues) > 0 {
				params = params.Queues(queues...)
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := client.River().JobList(cmd.Context(), params)
			if err != nil {
				return fmt.Errorf("error listing jobs: %w", err)
			}
			views := make([]jobView, len(res.Jobs))
			for i, j := range res.Jobs {
				views[i] = viewOf(j)
			}
			if asJSON {
				return a.printJSON(map[string]any{"jobs": views})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tCREATED\tLAST ERROR")
			for _, v := range views {
				lastErr := ""
				if n := len(v.Errors); n > 0 {
					lastErr = oneLine(v.Errors[n-1].Error, 60)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", v.ID, v.Kind, v.Queue, v.State, v.Attempt, v.MaxAttempts, v.CreatedAt.Local().Format(time.DateTime), lastErr)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only jobs in these states ("+strings.Join(validStates(), ", ")+")")
	f.StringSliceVar(&kinds, "kind", nil, "only jobs of these kinds")
	f.StringSliceVar(&queues, "queue", nil, "only jobs on these queues")
	f.IntVar(&limit, "limit", 50, "at most this many jobs")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func newJobsShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID...",
		Short: "Show jobs with their arguments and errors",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			views := make([]jobView, 0, len(ids))
			for _, id := range ids {
				job, err := client.River().JobGet(cmd.Context(), id)
				if errors.Is(err, river.ErrNotFound) {
					return fmt.Errorf("job %d not found", id)
				}
				if err != nil {
					return fmt.Errorf("error reading job %d: %w", id, err)
				}
				views = append(views, viewOf(job))
			}
			if asJSON {
				return a.printJSON(map[string]any{"jobs": views})
			}
			for _, v := range views {
				fmt.Fprintf(a.stdout, "job %d\n  kind:      %s\n  queue:     %s\n  state:     %s\n  attempt:   %d of %d\n  priority:  %d\n  args:      %s\n  created:   %s\n  scheduled: %s\n",
					v.ID, v.Kind, v.Queue, v.State, v.Attempt, v.MaxAttempts, v.Priority, v.Args, v.CreatedAt.Format(time.RFC3339), v.ScheduledAt.Format(time.RFC3339))
				if v.FinalizedAt != nil {
					fmt.Fprintf(a.stdout, "  finalized: %s\n", v.FinalizedAt.Format(time.RFC3339))
				}
				for _, e := range v.Errors {
					fmt.Fprintf(a.stdout, "  error (attempt %d, %s): %s\n", e.Attempt, e.At.Format(time.RFC3339), oneLine(e.Error, 200))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		return s[:max-1] + "…"
	}
	return s
}
