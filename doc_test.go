package tributary_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocOpensWithTheQuickStart: the package comment (what `go doc` shows
// first) has examples/quickstart/main.go as its first code block, line for
// line.
func TestDocOpensWithTheQuickStart(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "doc.go has the package comment")
	program, err := os.ReadFile("examples/quickstart/main.go")
	require.NoError(t, err)
	require.Equal(t, normalise(string(program)), normalise(firstCodeBlock(f.Doc.Text())),
		"doc.go's first code block must be examples/quickstart/main.go: copy the program into it, each line after //<tab>")
}

// firstCodeBlock returns the first run of indented lines of a doc
// comment's text (blank lines inside it included), without the indent.
func firstCodeBlock(text string) string {
	var block []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "\t"):
			block = append(block, strings.TrimPrefix(line, "\t"))
		case line == "" && len(block) > 0:
			block = append(block, "")
		case len(block) > 0:
			return strings.Join(block, "\n")
		}
	}
	return strings.Join(block, "\n")
}

// normalise drops trailing spaces of each line and blank lines at either
// end.
func normalise(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}
