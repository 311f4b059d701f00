package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// docLimits are the most lines each of these pages may have: the README is
// a newcomer's page, ARCHITECTURE a map rather than a notebook, BENCHMARKS
// the current figures only (git keeps the history).
var docLimits = []struct {
	path string
	max  int
}{
	{"README.md", 250},
	{"docs/ARCHITECTURE.md", 800},
	{"docs/BENCHMARKS.md", 300},
}

// checkLengths reports each page of docLimits that is longer than its limit.
func checkLengths(dir string) ([]string, error) {
	var problems []string
	for _, d := range docLimits {
		b, err := os.ReadFile(filepath.Join(dir, d.path))
		if errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s is missing.", d.path))
			continue
		}
		if err != nil {
			return nil, err
		}
		if n := countLines(b); n > d.max {
			problems = append(problems, fmt.Sprintf("%s has %d lines, more than its limit of %d; move reference material into a page of docs/.", d.path, n, d.max))
		}
	}
	return problems, nil
}

// countLines counts lines as wc -l does, plus a last line without a newline.
func countLines(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}
