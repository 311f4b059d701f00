// Command repocheck checks the repository as a product, for `make test`:
//
//   - files:   no tracked file is larger than 1 MiB or is an executable
//     binary or an object archive (by its magic bytes);
//   - links:   every relative link in README.md and docs/**/*.md names a
//     tracked file or directory, and a #fragment into a Markdown file names
//     one of its headings (GitHub's anchors);
//   - imports: no package under the top-level internal/ imports a package
//     above it (a feature package such as jobs/..., scheduler, amqpbridge or
//     outbox, the dashboard, the commands or the root package);
//   - lengths: README.md, docs/ARCHITECTURE.md and docs/BENCHMARKS.md stay
//     within their line limits (250, 800, 300).
//
// It prints one sentence per problem and exits 1 when there is any.
//
//	go run ./scripts/repocheck [-C dir] [files|links|imports|lengths ...]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// check is one of the checks: it returns a sentence per problem, or an
// error when it could not look.
type check struct {
	name string
	run  func(dir string) ([]string, error)
}

func checks() []check {
	return []check{
		{"files", checkFiles},
		{"links", checkLinks},
		{"imports", checkImports},
		{"lengths", checkLengths},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the checks the arguments name (all when none) in the repository
// at -C, writes the problems to stdout and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("repocheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("C", ".", "the repository's root")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	selected := checks()
	if fs.NArg() > 0 {
		selected = nil
		for _, name := range fs.Args() {
			found := false
			for _, c := range checks() {
				if c.name == name {
					selected, found = append(selected, c), true
				}
			}
			if !found {
				fmt.Fprintf(stderr, "repocheck: unknown check %q (want files, links, imports or lengths)\n", name)
				return 2
			}
		}
	}
	code := 0
	for _, c := range selected {
		problems, err := c.run(*dir)
		if err != nil {
			fmt.Fprintf(stderr, "repocheck: the %s check could not run: %v\n", c.name, err)
			code = 1
			continue
		}
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		if len(problems) > 0 {
			code = 1
		}
	}
	return code
}
