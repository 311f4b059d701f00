package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gitRepo makes a git repository in a temporary directory with files
// committed (a nil content stays out of the commit: written, not added).
func gitRepo(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=repocheck", "-c", "user.email=repocheck@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	git("init", "-q")
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if content == nil {
			require.NoError(t, os.WriteFile(p, []byte("untracked\n"), 0o644))
			continue
		}
		require.NoError(t, os.WriteFile(p, content, 0o644))
		git("add", "--", name)
	}
	git("commit", "-q", "--allow-empty", "-m", "test")
	return dir
}

// runChecks runs the command's main path on dir and returns its output and
// exit code.
func runChecks(t *testing.T, dir string, names ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"-C", dir}, names...), &stdout, &stderr)
	require.Empty(t, stderr.String())
	return stdout.String(), code
}

func TestFilesCheck(t *testing.T) {
	t.Parallel()

	t.Run("FailsOnACommittedTestBinary", func(t *testing.T) {
		t.Parallel()
		// This test's own executable: a real binary, and over 1 MiB.
		exe, err := os.Executable()
		require.NoError(t, err)
		bin, err := os.ReadFile(exe)
		require.NoError(t, err)
		dir := gitRepo(t, map[string][]byte{"README.md": []byte("# x\n"), "orders": bin})
		out, code := runChecks(t, dir, "files")
		require.Equal(t, 1, code, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		require.Regexp(t, `^orders is [0-9.]+ MiB \([0-9]+ bytes\), over the 1 MiB limit for a tracked file\.$`, lines[0])
		require.Regexp(t, `^orders is an? (ELF|Mach-O|PE).* and must not be tracked \(build outputs go to bin/ or a temporary directory\)\.$`, lines[1])
	})

	t.Run("SizeLimit", func(t *testing.T) {
		t.Parallel()
		dir := gitRepo(t, map[string][]byte{
			"exactly.txt": bytes.Repeat([]byte("a"), maxFileSize),
			"over.txt":    bytes.Repeat([]byte("a"), maxFileSize+1),
		})
		out, code := runChecks(t, dir, "files")
		require.Equal(t, 1, code)
		require.Equal(t, "over.txt is 1.0 MiB (1048577 bytes), over the 1 MiB limit for a tracked file.\n", out)
	})

	t.Run("PassesOnTextAndUntrackedBinaries", func(t *testing.T) {
		t.Parallel()
		dir := gitRepo(t, map[string][]byte{"README.md": []byte("MZ is not a PE header\n"), "bin/tributary": nil})
		out, code := runChecks(t, dir, "files")
		require.Equal(t, 0, code, out)
		require.Empty(t, out)
	})
}

func TestMagicKind(t *testing.T) {
	t.Parallel()
	pe := make([]byte, 0x80)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x40)
	copy(pe[0x40:], "PE\x00\x00")
	for _, tc := range []struct {
		name string
		head []byte
		want string
	}{
		{"ELF", []byte("\x7fELF\x02\x01\x01"), "ELF"},
		{"MachO64LE", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, "Mach-O executable"},
		{"MachO32BE", []byte{0xfe, 0xed, 0xfa, 0xce}, "Mach-O executable"},
		{"Universal", []byte{0xca, 0xfe, 0xba, 0xbe}, "universal"},
		{"PE", pe, "PE"},
		{"Archive", []byte("!<arch>\ndebian-binary"), "ar archive"},
		{"MZText", []byte("MZ, a text file that starts like a DOS header but is long enough to have a field at 0x3c."), ""},
		{"Text", []byte("package main\n"), ""},
		{"Empty", nil, ""},
		{"PNG", []byte("\x89PNG\r\n\x1a\n"), ""},
	} {
		got := magicKind(tc.head)
		if tc.want == "" {
			require.Empty(t, got, tc.name)
		} else {
			require.Contains(t, got, tc.want, tc.name)
		}
	}
}

func TestLinksCheck(t *testing.T) {
	t.Parallel()
	readme := "# tributary\n\n" +
		"See [the guide](docs/guide.md), [its events section](docs/guide.md#events-and-ordering-lanes),\n" +
		"[the CLI](./docs/cli.md#commands), [a source file](cmd/tool/main.go#L3), [the docs](docs/),\n" +
		"[the site](https://example.com/x.md), [mail](mailto:a@example.com), [top](#tributary), ![logo](<docs/logo space.svg>).\n" +
		"`[not a link](nowhere.md)` and\n\n```\n[nor this](nowhere.md)\n```\n\n" +
		"[ref]: docs/guide.md#usage-1\n"
	guide := "# Guide\n\n## Usage\n\n## Usage\n\n## Events and ordering (lanes)\n\n" +
		"Back to [the README](../README.md#tributary) and [CLI](cli.md).\n\n" +
		"A <a href=\"../cmd/tool/main.go\">source file</a>.\n"
	cli := "Commands\n--------\n\nSee [the guide](guide.md#usage).\n"
	good := map[string][]byte{
		"README.md":            []byte(readme),
		"docs/guide.md":        []byte(guide),
		"docs/cli.md":          []byte(cli),
		"docs/logo space.svg":  []byte("<svg/>"),
		"cmd/tool/main.go":     []byte("package main\n"),
		"notes/ignored-too.md": []byte("[broken](nowhere.md): only README.md and docs/ are checked\n"),
	}

	t.Run("Passes", func(t *testing.T) {
		t.Parallel()
		out, code := runChecks(t, gitRepo(t, good), "links")
		require.Equal(t, 0, code, out)
		require.Empty(t, out)
	})

	t.Run("FailsOnBrokenLinks", func(t *testing.T) {
		t.Parallel()
		files := map[string][]byte{}
		for k, v := range good {
			files[k] = v
		}
		files["docs/extra.md"] = []byte("# Extra\n\n" +
			"[gone](missing.md) and [a bad anchor](guide.md#usage-2),\n" +
			"[here](#nothing-here), [out](../../etc/passwd), [draft](draft.md).\n" +
			"[anchor case](guide.md#Usage)\n")
		files["docs/draft.md"] = nil // on disk, not tracked
		out, code := runChecks(t, gitRepo(t, files), "links")
		require.Equal(t, 1, code)
		require.Equal(t, strings.Join([]string{
			`docs/extra.md:3 links to "missing.md", which does not exist.`,
			`docs/extra.md:3 links to "guide.md#usage-2", but docs/guide.md has no heading with the anchor #usage-2.`,
			`docs/extra.md:4 links to "#nothing-here", but this file has no heading with that anchor.`,
			`docs/extra.md:4 links to "../../etc/passwd", which points outside the repository.`,
			`docs/extra.md:4 links to "draft.md", which exists but is not tracked by git.`,
			`docs/extra.md:5 links to "guide.md#Usage", but docs/guide.md has no heading with the anchor #Usage.`,
		}, "\n")+"\n", out)
	})
}

// TestSlug checks heading anchors against GitHub's rule: lower case, every
// character but letters, marks, digits, '_', '-' and ' ' dropped, spaces
// to '-', repeats numbered.
func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ heading, anchor string }{
		{"Quick start", "quick-start"},
		{"`make test` & CI", "make-test--ci"},
		{"Events and ordering (lanes)", "events-and-ordering-lanes"},
		{"What's new?", "whats-new"},
		{"Über café", "über-café"},
		{"snake_case_name and `EnqueueTx`", "snake_case_name-and-enqueuetx"},
		{"**Bold** and _it_", "bold-and-it"},
		{"[Linked](docs/x.md) text", "linked-text"},
		{"A -- B", "a----b"},
		{"v1.2.3 release", "v123-release"},
		{"🚀 Launch", "-launch"},
		{"AT&amp;T <em>now</em>", "att-now"},
		{"Heading with closing hashes ##", "heading-with-closing-hashes"},
	} {
		d := parseMarkdown("## " + tc.heading + "\n")
		require.Equal(t, []string{tc.anchor}, d.anchors, tc.heading)
	}
	d := parseMarkdown("# Usage\n\nUsage\n=====\n\n## Usage\n\n<a name=\"custom\"></a>\n")
	require.Equal(t, []string{"usage", "usage-1", "usage-2", "custom"}, d.anchors)
	d = parseMarkdown("- item\n---\n\n| a |\n|---|\n")
	require.Empty(t, d.anchors, "a list item or a table row above --- is no heading")
}

func TestImportsCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"go.mod":                   "module example.com/m\n\ngo 1.22\n",
		"queue/queue.go":           "package queue\n",
		"jobs/feat/feat.go":        "package feat\n",
		"dashboard/dashboard.go":   "package dashboard\n",
		"root.go":                  "package m\n",
		"internal/low/low.go":      "package low\n\nimport (\n\t_ \"example.com/m/internal/other\"\n\t_ \"example.com/m/queue\"\n\t_ \"fmt\"\n)\n",
		"internal/low/low_test.go": "package low\n\nimport _ \"example.com/m/dashboard\"\n",
		"internal/other/other.go":  "package other\n",
		"internal/up/up.go":        "package up\n\nimport (\n\t_ \"example.com/m\"\n\t_ \"example.com/m/dashboard\"\n\t_ \"example.com/m/jobs/feat\"\n)\n",
		"internal/old/old.go":      "package old\n\nimport _ \"example.com/m/jobs/feat\"\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	problems, err := checkImportsAllowing(dir, map[string]string{"internal/old": "test", "internal/gone": "test"})
	require.NoError(t, err)
	const tail = ", which stands above internal/ (a package under internal/ may import only internal/..., queue and migrations)."
	require.Equal(t, []string{
		"internal/gone is gone: remove its line from allowedUpward in scripts/repocheck/imports.go.",
		"internal/up imports the root package" + tail,
		"internal/up imports dashboard" + tail,
		"internal/up imports jobs/feat" + tail,
	}, problems, "a test's imports do not count; an allowed package is skipped")
}

func TestLengthsCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(path string, lines int) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, path), []byte(strings.Repeat("line\n", lines)), 0o644))
	}
	write("README.md", 250)
	write("docs/ARCHITECTURE.md", 800)
	write("docs/BENCHMARKS.md", 300)
	problems, err := checkLengths(dir)
	require.NoError(t, err)
	require.Empty(t, problems)

	write("docs/ARCHITECTURE.md", 801)
	require.NoError(t, os.Remove(filepath.Join(dir, "docs/BENCHMARKS.md")))
	problems, err = checkLengths(dir)
	require.NoError(t, err)
	require.Equal(t, []string{
		"docs/ARCHITECTURE.md has 801 lines, more than its limit of 800; move reference material into a page of docs/.",
		"docs/BENCHMARKS.md is missing.",
	}, problems)
}
