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
	markerRE = regexp.MustCompile(`^\s*<!-- snippet: (\S+) (\S+) -->\s*$`)
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
				mark = mm[1] + " " + mm[2]
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
// path (relative to the module's root).
func funcBody(path, name string) ([]string, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		return nil, err
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

// TestREADMESnippets checks that every Go block of README.md is a copy of
// the function its marker names, so that the README shows code that
// compiles and runs as it is written.
func TestREADMESnippets(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snips, err := snippets(string(text))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(snips) == 0 {
		t.Fatal("README.md has no Go block: the parser or the README changed")
	}
	seenUnmarked := map[string]bool{}
	for _, s := range snips {
		if s.marker == "" {
			first := strings.TrimSpace(s.code[0])
			if _, ok := unmarked[first]; !ok {
				t.Errorf("README.md:%d: a Go block without a marker: precede it with <!-- snippet: path/file.go Function --> naming the code it copies, or list it in unmarked with the reason", s.line)
			}
			seenUnmarked[first] = true
			continue
		}
		path, name, _ := strings.Cut(s.marker, " ")
		body, err := funcBody(path, name)
		if err != nil {
			t.Errorf("README.md:%d: marker %q: %v", s.line, s.marker, err)
			continue
		}
		if msg := mismatch(normalize(s.code), normalize(body)); msg != "" {
			t.Errorf("README.md:%d: the block is not a copy of %s in %s: %s", s.line, name, path, msg)
		}
	}
	for first, why := range unmarked {
		if !seenUnmarked[first] {
			t.Errorf("unmarked lists a block the README no longer has (%q, %s): remove it", first, why)
		}
	}
}

func TestSnippetsParse(t *testing.T) {
	t.Parallel()
	md := "text\n<!-- snippet: a/b.go F -->\n\n```go\nx := 1\n```\n\n```sh\n```go\n```\n" +
		"<!-- snippet: a/b.go G -->\nprose between\n```go\ny\n```\n   ```go\n   z\n   ```\n"
	got, err := snippets(md)
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{
		{line: 4, marker: "a/b.go F", code: []string{"x := 1"}},
		{line: 13, marker: "", code: []string{"y"}},
		{line: 16, marker: "", code: []string{"   z"}},
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
