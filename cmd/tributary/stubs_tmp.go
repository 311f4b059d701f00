package main

import "github.com/spf13/cobra"

func newEnqueueCmd(a *app) *cobra.Command   { return &cobra.Command{Use: "enqueue"} }
func newJobsCmd(a *app) *cobra.Command      { return &cobra.Command{Use: "jobs"} }
func newStatsCmd(a *app) *cobra.Command     { return &cobra.Command{Use: "stats"} }
func newBenchJobsCmd(a *app) *cobra.Command { return &cobra.Command{Use: "jobs"} }
