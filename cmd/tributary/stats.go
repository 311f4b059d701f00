package main

import (
	"cmp"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/queue"
)

// statsView is `tributary stats`: the job read model, counted exactly,
// every state broken down by queue.
type statsView struct {
	// ByState counts jobs per state over all queues (states with jobs).
	ByState map[string]int64 `json:"by_state"`
	// ByQueue counts jobs per queue and state, sorted by queue then state.
	ByQueue []queueStateCount `json:"by_queue"`
	// Total is the sum over all states.
	Total int64 `json:"total"`
	// OldestAvailableAt is when the longest-waiting available job became
	// runnable; nil when no job is available.
	OldestAvailableAt         *time.Time `json:"oldest_available_at,omitempty"`
	OldestAvailableAgeSeconds float64    `json:"oldest_available_age_seconds"`
	// TakenAt is the database time of the snapshot.
	TakenAt time.Time `json:"taken_at"`
}

// queueStateCount is the number of jobs of one queue in one state.
type queueStateCount struct {
	Queue string `json:"queue"`
	State string `json:"state"`
	Count int64  `json:"count"`
}

func statsViewOf(st *queue.JobStats) statsView {
	v := statsView{
		ByState: map[string]int64{}, ByQueue: []queueStateCount{},
		OldestAvailableAt: st.OldestAvailableAt, OldestAvailableAgeSeconds: st.OldestAvailableAgeSeconds, TakenAt: st.TakenAt,
	}
	for _, sc := range st.States {
		if sc.N > 0 {
			v.ByState[sc.State] = sc.N
			v.Total += sc.N
		}
	}
	for _, qs := range st.Queues {
		for state, c := range qs.States {
			if c.N > 0 {
				v.ByQueue = append(v.ByQueue, queueStateCount{Queue: qs.Queue, State: state, Count: c.N})
			}
		}
	}
	slices.SortFunc(v.ByQueue, func(a, b queueStateCount) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.State, b.State))
	})
	return v
}

func newStatsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count jobs by state and queue and show the oldest available job's age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			var st *queue.JobStats
			err = queue.ReadTx(ctx, pool, 0, func(tx pgx.Tx) error {
				st, err = queue.ReadJobStats(ctx, tx, a.cfg.Schema, queue.JobStatsParams{QueueStates: queue.JobStates()})
				return err
			})
			if err != nil {
				return err
			}
			v := statsViewOf(st)
			if asJSON {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "jobs: %d\n", v.Total)
			for _, s := range validStates() {
				if n := v.ByState[s]; n > 0 {
					fmt.Fprintf(a.stdout, "  %-10s %d\n", s, n)
				}
			}
			if v.OldestAvailableAt != nil {
				age := time.Duration(v.OldestAvailableAgeSeconds * float64(time.Second)).Round(time.Millisecond)
				fmt.Fprintf(a.stdout, "oldest available job waiting: %s\n", age)
			} else {
				fmt.Fprintln(a.stdout, "oldest available job waiting: none available")
			}
			if len(v.ByQueue) > 0 {
				fmt.Fprintln(a.stdout)
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tSTATE\tCOUNT")
				for _, qc := range v.ByQueue {
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
