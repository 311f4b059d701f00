package main

import (
	"fmt"
	"html"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// checkLinks reports the relative links of README.md and docs/**/*.md that
// name no tracked file or directory, and the #fragments into Markdown files
// that name none of the file's anchors. Links with a scheme (https:,
// mailto:) are not followed.
func checkLinks(dir string) ([]string, error) {
	paths, err := trackedFiles(dir)
	if err != nil {
		return nil, err
	}
	tracked := map[string]bool{}
	for _, p := range paths {
		tracked[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			tracked[d+"/"] = true
		}
	}
	docs := map[string]*mdDoc{}
	load := func(p string) (*mdDoc, error) {
		if d, ok := docs[p]; ok {
			return d, nil
		}
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		d := parseMarkdown(string(b))
		docs[p] = d
		return d, nil
	}
	var problems []string
	for _, p := range paths {
		if p != "README.md" && !(strings.HasPrefix(p, "docs/") && strings.HasSuffix(p, ".md")) {
			continue
		}
		d, err := load(p)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			if msg := checkLink(dir, p, l, tracked, load); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d links to %q, %s.", p, l.line, l.dest, msg))
			}
		}
	}
	return problems, nil
}

// checkLink returns what is wrong with link l of the file from, or "".
func checkLink(dir, from string, l mdLink, tracked map[string]bool, load func(string) (*mdDoc, error)) string {
	dest := l.dest
	if dest == "" || hasScheme(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, fragment, _ := strings.Cut(dest, "#")
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	file := from
	if target != "" {
		t, err := url.PathUnescape(target)
		if err != nil {
			return "whose path is not valid percent-encoding"
		}
		if strings.HasPrefix(t, "/") {
			file = path.Clean(strings.TrimPrefix(t, "/"))
		} else {
			file = path.Join(path.Dir(from), t)
		}
		if file == ".." || strings.HasPrefix(file, "../") {
			return "which points outside the repository"
		}
		switch {
		case file == ".":
			return "" // the repository's root
		case tracked[file]:
		case tracked[file+"/"]:
			if fragment != "" {
				return "a directory with a #fragment"
			}
			return ""
		default:
			if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
				return "which exists but is not tracked by git"
			}
			return "which does not exist"
		}
	}
	if fragment == "" || !strings.HasSuffix(file, ".md") {
		return "" // line anchors of source files (#L10) are GitHub's, not the file's
	}
	frag, err := url.PathUnescape(fragment)
	if err != nil {
		return "whose #fragment is not valid percent-encoding"
	}
	d, err := load(file)
	if err != nil {
		return fmt.Sprintf("whose file cannot be read (%v)", err)
	}
	if slices.Contains(d.anchors, frag) {
		return ""
	}
	if file == from {
		return "but this file has no heading with that anchor"
	}
	return fmt.Sprintf("but %s has no heading with the anchor #%s", file, frag)
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func hasScheme(dest string) bool { return schemeRE.MatchString(dest) }

// mdDoc is what the link check needs of a Markdown file: its links and the
// anchors GitHub gives its headings.
type mdDoc struct {
	links   []mdLink
	anchors []string
}

type mdLink struct {
	line int
	dest string
}

var (
	// inlineLinkRE finds the destination of [text](dest "title") and
	// ![alt](dest), a destination in <...> or one without spaces that may
	// hold balanced parentheses.
	inlineLinkRE = regexp.MustCompile(`\]\(\s*(<[^>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDefRE finds a link reference definition: [label]: dest.
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// htmlLinkRE finds href="..." and src="..." in inline HTML.
	htmlLinkRE = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:href|src)\s*=\s*"([^"]*)"`)
	// htmlAnchorRE finds explicit anchors: <a name="x"> or id="x".
	htmlAnchorRE = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:name|id)\s*=\s*"([^"]*)"`)
	atxRE        = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE     = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	fenceRE      = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	// notSetextText matches lines that cannot be a setext heading's text
	// (a table row, a list item, a quote): a --- under them is not an
	// underline.
	notSetextText = regexp.MustCompile(`^\s*(\||[-*+] |\d+[.)] |>)`)
)

// parseMarkdown collects the links and heading anchors of a Markdown
// document, outside fenced code blocks and code spans.
func parseMarkdown(src string) *mdDoc {
	d := &mdDoc{}
	used := map[string]int{}
	addHeading := func(text string) {
		base := slug(headingText(text))
		a := base
		if n := used[base]; n > 0 {
			a = fmt.Sprintf("%s-%d", base, n)
		}
		used[base]++
		d.anchors = append(d.anchors, a)
	}
	lines := strings.Split(src, "\n")
	fence := ""
	prevText := "" // the previous line, when it may be a setext heading's text
	for i, raw := range lines {
		line := strings.TrimRight(raw, "\r")
		if fence != "" {
			if m := fenceRE.FindStringSubmatch(line); m != nil && m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(line[len(m[0]):]) == "" {
				fence = ""
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence, prevText = m[1], ""
			continue
		}
		if m := atxRE.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prevText = ""
		} else if setextRE.MatchString(line) && prevText != "" {
			addHeading(prevText)
			prevText = ""
		} else if strings.TrimSpace(line) == "" || notSetextText.MatchString(line) {
			prevText = ""
		} else {
			prevText = line
		}
		text := stripCodeSpans(line)
		for _, m := range inlineLinkRE.FindAllStringSubmatch(text, -1) {
			d.links = append(d.links, mdLink{line: i + 1, dest: strings.Trim(m[1], "<>")})
		}
		if m := refDefRE.FindStringSubmatch(text); m != nil {
			d.links = append(d.links, mdLink{line: i + 1, dest: strings.Trim(m[1], "<>")})
		}
		for _, m := range htmlLinkRE.FindAllStringSubmatch(text, -1) {
			d.links = append(d.links, mdLink{line: i + 1, dest: html.UnescapeString(m[1])})
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(text, -1) {
			d.anchors = append(d.anchors, m[1])
		}
	}
	return d
}

// replaceCodeSpans returns line with each code span (backticks
// included) replaced by repl of its contents; a run of backticks without a
// closing run of the same length stays as it is.
func replaceCodeSpans(line string, repl func(code string) string) string {
	var out strings.Builder
	i := 0
	for i < len(line) {
		if line[i] != '`' {
			out.WriteByte(line[i])
			i++
			continue
		}
		n := ticks(line, i)
		open := i + n
		closeAt := -1
		for j := open; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			m := ticks(line, j)
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			out.WriteString(line[i:open])
			i = open
			continue
		}
		out.WriteString(repl(line[open:closeAt]))
		i = closeAt + n
	}
	return out.String()
}

func ticks(s string, i int) int {
	n := 0
	for i+n < len(s) && s[i+n] == '`' {
		n++
	}
	return n
}

// stripCodeSpans blanks a line's code spans, so nothing inside them reads
// as a link.
func stripCodeSpans(line string) string {
	return replaceCodeSpans(line, func(code string) string { return strings.Repeat(" ", len(code)+2) })
}

var (
	mdImageRE    = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	mdLinkTextRE = regexp.MustCompile(`\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])`)
	htmlTagRE    = regexp.MustCompile(`<[^>]*>`)
	emphOpenRE   = regexp.MustCompile(`(^|[^\p{L}\p{N}])[*_]+([^\s*_])`)
	emphCloseRE  = regexp.MustCompile(`([^\s*_])[*_]+([^\p{L}\p{N}]|$)`)
	escapeRE     = regexp.MustCompile(`\\([!-/:-@\[-` + "`" + `{-~])`)
)

// headingText is the text GitHub renders for a heading's Markdown source:
// links and images reduced to their text, code spans, emphasis and HTML
// tags to their contents, escapes and entities resolved.
func headingText(src string) string {
	s := mdImageRE.ReplaceAllString(src, "$1")
	s = mdLinkTextRE.ReplaceAllString(s, "$1")
	// Code spans keep their contents verbatim: set them aside first.
	var spans []string
	s = replaceCodeSpans(s, func(code string) string {
		spans = append(spans, code)
		return fmt.Sprintf("\x00%d\x00", len(spans)-1)
	})
	s = htmlTagRE.ReplaceAllString(s, "")
	for range 2 { // nested emphasis: ***a*** and _**a**_
		s = emphOpenRE.ReplaceAllString(s, "$1$2")
		s = emphCloseRE.ReplaceAllString(s, "$1$2")
	}
	s = escapeRE.ReplaceAllString(s, "$1")
	s = html.UnescapeString(s)
	for i, span := range spans {
		s = strings.Replace(s, fmt.Sprintf("\x00%d\x00", i), strings.TrimSpace(span), 1)
	}
	return strings.TrimSpace(s)
}

// slug is GitHub's anchor for a heading's text: lower case, every
// character but letters, marks, digits, connector punctuation (_), '-' and
// ' ' removed, then each space a '-'. Repeats get -1, -2, ... (parseMarkdown).
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
