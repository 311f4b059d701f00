package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
)

// lowerLayers are the module's packages outside internal/ that a package
// under the top-level internal/ may import: the runtime and the migrations
// the lower layers and the test helpers are built on. Every other package
// of the module (jobs/..., scheduler, amqpbridge, outbox, dashboard, cmd/...,
// the root package) stands above internal/, and an import of one by a
// package under internal/ runs the graph back up.
var lowerLayers = []string{"queue", "migrations"}

// allowedUpward lists packages under internal/ that still import a package
// above them, each with the reason it may until it is gone.
var allowedUpward = map[string]string{}

// checkImports reports every import, outside tests, of a package above
// internal/ by a package under the top-level internal/.
func checkImports(dir string) ([]string, error) {
	return checkImportsAllowing(dir, allowedUpward)
}

// checkImportsAllowing is checkImports with allowed in place of
// allowedUpward.
func checkImportsAllowing(dir string, allowed map[string]string) ([]string, error) {
	mod, err := goOutput(dir, "list", "-m")
	if err != nil {
		return nil, err
	}
	module := strings.TrimSpace(mod)
	out, err := goOutput(dir, "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./internal/...")
	if err != nil {
		return nil, err
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	return upwardImports(module, graph, allowed), sc.Err()
}

// upwardImports applies the rule of checkImports to graph (a package's
// import path to its imports), whose packages are all under internal/,
// with the packages allowed names (relative to the module) exempt.
func upwardImports(module string, graph map[string][]string, allowed map[string]string) []string {
	var problems []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, rel := range slices.Sorted(maps.Keys(allowed)) {
		if _, ok := graph[module+"/"+rel]; !ok {
			problems = append(problems, fmt.Sprintf("%s is gone: remove its line from allowedUpward in scripts/repocheck/imports.go.", rel))
		}
	}
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(pkg, module+"/")
		if _, ok := allowed[rel]; ok {
			continue
		}
		for _, imp := range graph[pkg] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue // the standard library or another module
			}
			target := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if target == "internal" || strings.HasPrefix(target, "internal/") || slices.Contains(lowerLayers, target) {
				continue
			}
			if target == "" {
				target = "the root package"
			}
			problems = append(problems, fmt.Sprintf("%s imports %s, which stands above internal/ (a package under internal/ may import only internal/..., %s).",
				rel, target, strings.Join(lowerLayers, " and ")))
		}
	}
	return problems
}

// goOutput runs the go command in dir and returns its standard output.
func goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
