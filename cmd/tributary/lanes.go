package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

func newLanesCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "lanes",
		Short: "List blocked event lanes (aggregates of a consumer held by a given-up event), retry or skip their head",
		Long: `A consumer with the block policy (events.OrderingBlock, the default) handles the
events of one aggregate in order; when one fails for good (retries used up, a
validation failure), the aggregate's later events wait: its lane is blocked.
List them, then retry the blocking event (it runs again in its place) or skip
it (the lane moves on; the skipped job stays replayable with jobs retry).`,
	})
	cmd.AddCommand(newLanesListCmd(a), newLaneActionCmd(a, "retry", "Run a blocked lane's head again, in its place", events.RetryLane),
		newLaneActionCmd(a, "skip", "Give up a blocked lane's head: the lane moves on to its next event", events.SkipLane))
	return cmd
}

func newLanesListCmd(a *app) *cobra.Command {
	var consumer string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List blocked lanes, longest blocked first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10000 {
				return usagef("--limit %d is out of range: want 1 to 10000", limit)
			}
			if cmd.Flags().Changed("consumer") {
				if err := checkConsumerName(consumer); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			lanes, err := events.ListBlockedLanes(ctx, pool, a.cfg.Schema, events.LaneListParams{Consumer: consumer, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"lanes": lanes})
			}
			if len(lanes) == 0 {
				fmt.Fprintln(a.stdout, "no blocked lanes")
				return nil
			}
			for _, l := range lanes {
				fmt.Fprintln(a.stdout, oneLine(l.String(), 400))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&consumer, "consumer", "", "only this consumer's lanes")
	f.IntVar(&limit, "limit", 1000, "at most this many lanes")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func newLaneActionCmd(a *app, name, short string, fn func(ctx context.Context, c *queue.Client, consumer, aggregate string) (*events.JobActionResult, error)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   name + " CONSUMER AGGREGATE",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			consumer, aggregate := args[0], args[1]
			if err := checkConsumerName(consumer); err != nil {
				return err
			}
			if aggregate == "" {
				return usagef("the aggregate id is empty")
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := fn(cmd.Context(), client, consumer, aggregate)
			if errors.Is(err, events.ErrUnknownConsumer) || errors.Is(err, events.ErrLaneNotBlocked) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(laneActionView(name, res))
			}
			switch {
			case name == "skip":
				fmt.Fprintf(a.stdout, "aggregate %s of consumer %s skipped job %d and moved on to its next event\n", aggregate, consumer, res.JobID)
			case res.ReinsertedFrom != 0:
				fmt.Fprintf(a.stdout, "job %d was deleted by River's retention; its event is back in aggregate %s of consumer %s as job %d (state %s)\n", res.ReinsertedFrom, aggregate, consumer, res.Job.ID, res.Job.State)
			default:
				fmt.Fprintf(a.stdout, "job %d of aggregate %s of consumer %s retried (state %s)\n", res.Job.ID, aggregate, consumer, res.Job.State)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

// laneAction is the JSON answer of lanes retry|skip.
type laneAction struct {
	Action      string `json:"action"`
	Consumer    string `json:"consumer"`
	AggregateID string `json:"aggregate_id"`
	JobID       int64  `json:"job_id"`
	JobState    string `json:"job_state"`
	// ReinsertedFrom is the blocking job River's retention had deleted,
	// whose event the retry put back as JobID.
	ReinsertedFrom int64 `json:"reinserted_from,omitempty"`
}

func laneActionView(action string, res *events.JobActionResult) laneAction {
	v := laneAction{Action: action, Consumer: res.Consumer, AggregateID: res.AggregateID, JobID: res.JobID, ReinsertedFrom: res.ReinsertedFrom, JobState: "gone"}
	if res.Job != nil {
		v.JobState = string(res.Job.State)
	}
	return v
}

// checkConsumerName rejects a consumer name that cannot exist.
func checkConsumerName(name string) error {
	if name == "" {
		return usagef("the consumer name is empty")
	}
	if err := events.ValidateEventName(name); err != nil {
		return usagef("invalid consumer name %q: use letters, digits and . _ : -", name)
	}
	return nil
}
