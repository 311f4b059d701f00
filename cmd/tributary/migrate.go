package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/migrations"
)

func pidOf() int { return os.Getpid() }

func newMigrateCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "migrate",
		Short: "Apply, roll back or list schema migrations (River's and tributary's)",
	})
	var asJSON bool
	migrator := func(cmd *cobra.Command) (*migrations.Migrator, func(), error) {
		pool, err := a.pool(cmd.Context())
		if err != nil {
			return nil, nil, err
		}
		m, err := migrations.New(pool, migrations.Config{Schema: a.cfg.Schema, Logger: a.logger})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return m, pool.Close, nil
	}
	printResult := func(verb string, res *migrations.Result) error {
		if asJSON {
			return a.printJSON(res)
		}
		if len(res.Steps) == 0 {
			fmt.Fprintf(a.stdout, "nothing to %s in schema %s\n", verb, a.cfg.Schema)
			return nil
		}
		for _, s := range res.Steps {
			fmt.Fprintf(a.stdout, "%s %s %04d %s\n", verb, s.Line, s.Version, s.Name)
		}
		return nil
	}
	// step builds up or down: both run one Migrator method and print what it
	// changed.
	step := func(use, short, verb string, fn func(*migrations.Migrator, context.Context) (*migrations.Result, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				m, closeFn, err := migrator(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				res, err := fn(m, cmd.Context())
				if err != nil {
					return err
				}
				return printResult(verb, res)
			},
		}
	}
	up := step("up", "Apply every pending migration", "migrate", (*migrations.Migrator).Up)
	down := step("down", "Roll back the latest tributary migration (River's are left alone)", "roll back", (*migrations.Migrator).Down)
	status := &cobra.Command{
		Use:   "status",
		Short: "List applied and pending migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, closeFn, err := migrator(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			for _, s := range st.Applied {
				fmt.Fprintf(a.stdout, "applied  %-9s %04d %s\n", s.Line, s.Version, s.Name)
			}
			for _, s := range st.Pending {
				fmt.Fprintf(a.stdout, "pending  %-9s %04d %s\n", s.Line, s.Version, s.Name)
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{up, down, status} {
		c.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
		cmd.AddCommand(c)
	}
	return cmd
}
