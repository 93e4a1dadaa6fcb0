package readme

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the module's root, where README.md is, relative to this package.
const root = "../.."

// unmarked lists the Go blocks of the README that are not copies of code in
// the module, by their first line, with the reason. Empty: every Go block is
// a marked copy.
var unmarked = map[string]string{}

// snippet is one fenced Go block of a Markdown file.
type snippet struct {
	line   int      // line of the opening fence, 1-based
	marker string   // "path func", or "" when the block has none
	code   []string // the block's lines, as written
}

var (
	markerRE = regexp.MustCompile(`^\s*<!-- snippet: (\S+)(?: (\S+))? -->\s*$`)
	fenceRE  = regexp.MustCompile("^\\s*```(\\w*)\\s*$")
)

// snippets returns the Go blocks of the Markdown in text, each with the
// marker on the last non-blank line before its fence, if there is one.
func snippets(text string) ([]snippet, error) {
	var (
		out       []snippet
		cur       *snippet
		lastMark  string
		lastSolid string // the last non-blank line outside a block
		inOther   bool   // inside a fenced block that is not Go
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		m := fenceRE.FindStringSubmatch(l)
		switch {
		case cur != nil && m != nil && m[1] == "":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code = append(cur.code, l)
		case inOther:
			inOther = m == nil || m[1] != ""
		case m != nil && m[1] == "go":
			mark := ""
			if lastMark != "" && lastMark == lastSolid {
				mm := markerRE.FindStringSubmatch(lastMark)
				mark = strings.TrimSpace(mm[1] + " " + mm[2])
			}
			cur = &snippet{line: n, marker: mark}
		case m != nil:
			inOther = true
		case strings.TrimSpace(l) != "":
			lastSolid = l
			if markerRE.MatchString(l) {
				lastMark = l
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("the Go block opened at line %d is never closed", cur.line)
	}
	return out, sc.Err()
}

// normalize drops blank lines and a line's leading and trailing blanks, and
// turns every run of blanks inside a line into one space: indentation and
// alignment are the formatter's and Markdown's, not content.
func normalize(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// funcBody returns the lines of the body of function name in the Go file at
// path (relative to the module's root), or with name "" the whole file.
func funcBody(path, name string) ([]string, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		return nil, err
	}
	if name == "" {
		return strings.Split(string(src), "\n"), nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != name || fd.Body == nil {
			continue
		}
		from, to := fset.Position(fd.Body.Lbrace).Offset+1, fset.Position(fd.Body.Rbrace).Offset
		return strings.Split(string(src[from:to]), "\n"), nil
	}
	return nil, fmt.Errorf("%s has no function %s", path, name)
}

// mismatch says where snip (normalized) stops being a run of body
// (normalized), or "" if it is one: it finds the run that matches the most
// leading lines and reports the first line after them.
func mismatch(snip, body []string) string {
	if len(snip) == 0 {
		return "the block is empty"
	}
	best, bestAt := -1, 0
	for i := range body {
		n := 0
		for n < len(snip) && i+n < len(body) && snip[n] == body[i+n] {
			n++
		}
		if n == len(snip) {
			return ""
		}
		if n > best {
			best, bestAt = n, i
		}
	}
	if best == 0 {
		return fmt.Sprintf("its first line is nowhere in the function:\n\tREADME: %s", snip[0])
	}
	want := "(the function ends)"
	if bestAt+best < len(body) {
		want = body[bestAt+best]
	}
	return fmt.Sprintf("it follows the function for %d lines, then differs:\n\tREADME:   %s\n\tfunction: %s", best, snip[best], want)
}

// docs returns the Markdown files whose Go blocks and links are checked:
// README.md and docs/*.md, relative to the module's root.
func docs(t *testing.T) []string {
	t.Helper()
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, m := range more {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// TestREADMESnippets checks that every Go block of README.md and docs/*.md
// is a copy of the function its marker names (or of the whole file, for a
// marker naming a file alone), so that the docs show code that compiles and
// runs as it is written.
func TestREADMESnippets(t *testing.T) {
	seenUnmarked := map[string]bool{}
	for _, doc := range docs(t) {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		snips, err := snippets(string(text))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if doc == "README.md" && len(snips) == 0 {
			t.Fatal("README.md has no Go block: the parser or the README changed")
		}
		for _, s := range snips {
			if s.marker == "" {
				first := strings.TrimSpace(s.code[0])
				if _, ok := unmarked[first]; !ok {
					t.Errorf("%s:%d: a Go block without a marker: precede it with <!-- snippet: path/file.go Function --> naming the code it copies (or <!-- snippet: path/file.go --> for a whole file), or list it in unmarked with the reason", doc, s.line)
				}
				seenUnmarked[first] = true
				continue
			}
			path, name, _ := strings.Cut(s.marker, " ")
			body, err := funcBody(path, name)
			if err != nil {
				t.Errorf("%s:%d: marker %q: %v", doc, s.line, s.marker, err)
				continue
			}
			if name == "" {
				if got, want := normalize(s.code), normalize(body); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s:%d: the block is not the whole of %s: %s", doc, s.line, path, mismatch(got, want))
				}
				continue
			}
			if msg := mismatch(normalize(s.code), normalize(body)); msg != "" {
				t.Errorf("%s:%d: the block is not a copy of %s in %s: %s", doc, s.line, name, path, msg)
			}
		}
	}
	for first, why := range unmarked {
		if !seenUnmarked[first] {
			t.Errorf("unmarked lists a block the docs no longer have (%q, %s): remove it", first, why)
		}
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// anchors returns the anchors GitHub gives the headings of the Markdown
// text: lower case, spaces to hyphens, other punctuation dropped, a
// repeated one numbered from -1.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if fenceRE.MatchString(l) {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocLinks checks that every relative link of README.md and docs/*.md
// names a file or directory of the repository, and that a link to a
// Markdown file's #anchor names one of its headings: a section moved or
// renamed leaves no dangling link behind.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	for _, doc := range docs(t) {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range strings.Split(string(text), "\n") {
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, filepath.FromSlash(doc))
				if path != "" {
					file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: no such file", doc, n+1, target)
					continue
				}
				if anchor == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(b))[anchor] {
					t.Errorf("%s:%d: link %q: no heading with that anchor", doc, n+1, target)
				}
			}
		}
	}
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	got := anchors("# claimfirst\n## As a container (`worker run`)\n```sh\n# not a heading\n```\n## Shutdown\n### Shutdown\n## FIFO queues, in order\n")
	for _, want := range []string{"claimfirst", "as-a-container-worker-run", "shutdown", "shutdown-1", "fifo-queues-in-order"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("anchors: a comment in a code block taken for a heading")
	}
}

func TestSnippetsParse(t *testing.T) {
	t.Parallel()
	md := "text\n<!-- snippet: a/b.go F -->\n\n```go\nx := 1\n```\n\n```sh\n```go\n```\n" +
		"<!-- snippet: a/b.go G -->\nprose between\n```go\ny\n```\n   ```go\n   z\n   ```\n" +
		"<!-- snippet: a/main.go -->\n```go\npackage main\n```\n"
	got, err := snippets(md)
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{
		{line: 4, marker: "a/b.go F", code: []string{"x := 1"}},
		{line: 13, marker: "", code: []string{"y"}},
		{line: 16, marker: "", code: []string{"   z"}},
		{line: 20, marker: "a/main.go", code: []string{"package main"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snippets =\n%v\nwant\n%v", got, want)
	}
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	body := normalize([]string{"\ta := 1", "", "\tif a > 0 {", "\t\tb(a)   // c", "\t}"})
	tests := []struct {
		name string
		snip []string
		want string // a part of the message, "" for a match
	}{
		{"whole body", []string{"a := 1", "if a > 0 {", "  b(a) // c", "}"}, ""},
		{"a run inside", []string{"    if a > 0 {", "b(a)\t// c"}, ""},
		{"one line changed", []string{"a := 1", "if a > 1 {"}, "follows the function for 1 lines"},
		{"a line added at the end", []string{"}", "return"}, "(the function ends)"},
		{"not there at all", []string{"c := 2"}, "nowhere in the function"},
		{"empty", nil, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := mismatch(normalize(tt.snip), body)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("mismatch = %q, want one containing %q", got, tt.want)
			}
		})
	}
}
