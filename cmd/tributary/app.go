package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/queue"
)

// Exit codes of the CLI contract.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a usage or configuration mistake: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// app holds what every command shares: output streams, global flags and,
// once loaded, the configuration.
type app struct {
	stdout io.Writer
	stderr io.Writer

	databaseURL string
	schema      string
	amqpURL     string
	logLevel    string
	logFormat   string

	// benchCPUProfile is `bench --cpuprofile`.
	benchCPUProfile string

	cfg    tributary.Config
	logger *slog.Logger

	// stopTracing flushes and stops the trace exporter startTracing
	// installed; nil when none.
	stopTracing func()
}

// loadConfig reads the environment, applies the global flags over it and
// validates the result. A bad value is a usage error naming it.
func (a *app) loadConfig() error {
	cfg, err := tributary.ConfigFromEnvWith(map[string]string{
		"DATABASE_URL":     a.databaseURL,
		"TRIBUTARY_SCHEMA": a.schema,
		"AMQP_URL":         a.amqpURL,
		"LOG_LEVEL":        a.logLevel,
		"LOG_FORMAT":       a.logFormat,
	})
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	a.cfg = cfg
	a.logger = cfg.NewLogger(a.stderr)
	return nil
}

// pool connects to the configured database.
func (a *app) pool(ctx context.Context) (*pgxpool.Pool, error) {
	return tributary.NewPool(ctx, a.cfg)
}

// bridge returns the AMQP bridge's configuration with the CLI's logger: with
// AMQP_URL unset it is the local default broker (the DLQ commands use that).
func (a *app) bridge() amqpbridge.Config {
	cfg := a.cfg.AMQP.Bridge
	cfg.Logger = a.logger
	return cfg
}

// client connects and returns an insert-only client with its pool; the
// caller closes the pool.
func (a *app) client(ctx context.Context) (*queue.Client, *pgxpool.Pool, error) {
	pool, err := a.pool(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err := queue.NewClient(pool, queue.ClientConfig{Schema: a.cfg.Schema, Logger: a.logger})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// printJSON writes v as one indented JSON document on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// run executes the CLI and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if a.stopTracing != nil {
		a.stopTracing()
	}
	if err == nil {
		return exitOK
	}
	msg := strings.TrimSpace(err.Error())
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	fmt.Fprintln(stderr, "tributary: "+msg)
	var ue *usageError
	var ce *queue.ConfigError
	var xe *exitCodeError
	if errors.As(err, &xe) {
		return xe.code
	}
	if errors.As(err, &ue) || errors.As(err, &ce) || isCobraUsageError(err) {
		return exitUsage
	}
	return exitFailure
}

// isCobraUsageError recognises the errors cobra returns for unknown
// commands, unknown flags and bad flag values.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "tributary",
		Short:         "Durable jobs, outbox events, cron, batch flushes and an AMQP bridge on PostgreSQL",
		SilenceUsage:  true,
		SilenceErrors: true,
		// A bare `tributary foo` must be an error, not help text.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for tributary; run `tributary --help` for the list", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := a.loadConfig(); err != nil {
				return err
			}
			return a.startTracing(cmd.Context())
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.databaseURL, "database-url", "", "Postgres URL (overrides DATABASE_URL)")
	pf.StringVar(&a.schema, "schema", "", "schema of River's and tributary's tables (overrides TRIBUTARY_SCHEMA)")
	pf.StringVar(&a.amqpURL, "amqp-url", "", "RabbitMQ URL (overrides AMQP_URL)")
	pf.StringVar(&a.logLevel, "log-level", "", "debug, info, warn or error (overrides LOG_LEVEL)")
	pf.StringVar(&a.logFormat, "log-format", "", "text or json (overrides LOG_FORMAT)")
	for _, cmd := range commands(a) {
		root.AddCommand(cmd)
	}
	return root
}

// subcommandsOnly makes a command that only groups subcommands reject an
// unknown subcommand with a usage error instead of printing help.
func subcommandsOnly(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %s", args[0], c.CommandPath())
		}
		return usagef("%s needs a subcommand; run `%s --help`", c.CommandPath(), c.CommandPath())
	}
	cmd.RunE = func(c *cobra.Command, args []string) error { return nil }
	return cmd
}
