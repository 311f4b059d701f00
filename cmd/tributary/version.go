package main

import (
	"cmp"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo is what `tributary version` prints.
type versionInfo struct {
	Module       string `json:"module"`
	Version      string `json:"version"`
	Revision     string `json:"revision,omitempty"`
	RevisionTime string `json:"revision_time,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
	GoVersion    string `json:"go_version"`
}

// readVersion reads the binary's build information: the module version
// (a tag or pseudo-version with `go install ...@v`, "(devel)" for a build
// from a checkout), the VCS revision the go command stamped, and the Go
// version it was built with.
func readVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return versionInfo{Module: "github.com/tributary-run/tributary", Version: "unknown", GoVersion: "unknown"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: cmp.Or(bi.Main.Version, "unknown"), GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS revision and Go version of this binary",
		Args:  cobra.NoArgs,
		// Needs no configuration: it works with a broken environment too.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			v := readVersion()
			if asJSON {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "tributary %s\n", v.Version)
			if v.Revision != "" {
				rev := v.Revision
				if v.RevisionTime != "" {
					rev += " (" + v.RevisionTime + ")"
				}
				if v.Modified {
					rev += ", with uncommitted changes"
				}
				fmt.Fprintf(a.stdout, "revision %s\n", rev)
			}
			fmt.Fprintf(a.stdout, "built with %s\n", v.GoVersion)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
