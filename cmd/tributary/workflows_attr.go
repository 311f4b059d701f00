package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// workflowCountCap bounds `workflows list --counts`: it counts the newest
// this many matching workflows, and says so beyond.
const workflowCountCap = 10_000

// parseAttrFlags reads repeated --attr key=value flags; a malformed one or
// a key given twice is a usage error naming it.
func parseAttrFlags(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	attrs := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, err := workflow.ParseAttribute(f)
		if err != nil {
			return nil, usagef("invalid --attr: %v", err)
		}
		if _, dup := attrs[k]; dup {
			return nil, usagef("invalid --attr: key %q given twice", k)
		}
		attrs[k] = v
	}
	return attrs, nil
}

// statusCountsLine writes counts per status: "completed 7, failed 2 (of
// the newest 10000)".
func statusCountsLine(counts map[workflow.Status]queue.Count) string {
	var parts []string
	approx := false
	for _, st := range workflow.Statuses() {
		parts = append(parts, fmt.Sprintf("%s %d", st, counts[st].N))
		approx = approx || counts[st].Approximate
	}
	line := "counts: " + strings.Join(parts, ", ")
	if approx {
		line += fmt.Sprintf(" (of the newest %d matches)", workflowCountCap)
	}
	return line
}

// attributesLine writes attributes as key=value, in key order.
func attributesLine(attrs map[string]string) string {
	parts := make([]string, 0, len(attrs))
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		parts = append(parts, k+"="+attrs[k])
	}
	return strings.Join(parts, " ")
}
