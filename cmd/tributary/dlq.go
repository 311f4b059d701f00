package main

import (
	"cmp"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/amqpbridge"
)

func newDLQCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "dlq",
		Short: "Inspect and replay the failed messages of an AMQP queue ({name}.failed)",
	})
	cmd.AddCommand(newDLQListCmd(a), newDLQReplayCmd(a))
	return cmd
}

// dlq returns the DLQ tools for the configured broker (AMQP_URL, else the
// local default) and QUEUE_PREFIX.
func (a *app) dlq() (*amqpbridge.DLQ, error) {
	cfg := a.bridge()
	cfg.ConnectionName = "tributary-cli"
	return amqpbridge.NewDLQ(cfg)
}

// dlqError turns an unknown queue or a refused replay target into a usage
// error (exit 2).
func dlqError(err error) error {
	if errors.Is(err, amqpbridge.ErrQueueNotFound) || errors.Is(err, amqpbridge.ErrInvalidReplayTarget) {
		return &usageError{msg: err.Error()}
	}
	return err
}

func newDLQListCmd(a *app) *cobra.Command {
	var (
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List messages in QUEUE's failed queue without removing them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyArg("QUEUE", args[0]); err != nil {
				return err
			}
			if limit < 1 {
				return usagef("--limit %d must be at least 1", limit)
			}
			dlq, err := a.dlq()
			if err != nil {
				return &usageError{msg: err.Error()}
			}
			msgs, depth, err := dlq.List(cmd.Context(), args[0], limit)
			if err != nil {
				return dlqError(err)
			}
			if asJSON {
				if msgs == nil {
					msgs = []amqpbridge.FailedMessage{}
				}
				return a.printJSON(map[string]any{"queue": args[0], "depth": depth, "messages": msgs})
			}
			fmt.Fprintf(a.stdout, "%d failed messages in %s (showing %d)\n", depth, args[0], len(msgs))
			if len(msgs) == 0 {
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MESSAGE ID\tRETRIES\tFAILED AT\tREASON\tBODY")
			for _, m := range msgs {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", m.MessageID, m.RetryCount, m.FailedAt, clip(m.Reason, 80), clip(m.Body, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	cmd.Flags().IntVar(&limit, "limit", amqpbridge.ListLimitDefault, "list at most this many messages")
	return cmd
}

func newDLQReplayCmd(a *app) *cobra.Command {
	var (
		limit int
		to    string
	)
	cmd := &cobra.Command{
		Use:   "replay QUEUE",
		Short: "Move failed messages back to QUEUE with the retry count reset",
		Long: `Move failed messages back to QUEUE (or to the queue --to names) with the
retry count reset and the failure headers removed. The messages' own
x-original-queue header is not followed: whoever can publish to the failed
queue could otherwise send a replay into any queue.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyArg("QUEUE", args[0]); err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit %d must not be negative", limit)
			}
			if cmd.Flags().Changed("to") && to == "" {
				return usagef("--to needs a queue name")
			}
			dlq, err := a.dlq()
			if err != nil {
				return &usageError{msg: err.Error()}
			}
			n, err := dlq.ReplayTo(cmd.Context(), args[0], to, limit)
			if err != nil {
				return dlqError(err)
			}
			fmt.Fprintf(a.stdout, "replayed %d messages to %s\n", n, cmp.Or(to, args[0]))
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "replay at most this many messages (0: all)")
	cmd.Flags().StringVar(&to, "to", "", "replay into this queue instead of QUEUE (QUEUE_PREFIX applies; it must exist)")
	return cmd
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
