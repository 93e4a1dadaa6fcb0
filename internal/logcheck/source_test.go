package logcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoDurationAttrsInSource: no code of the module (tests aside) builds a
// slog.Duration attribute, which a JSON handler writes as a bare integer of
// nanoseconds. The Handler finds the rest at run time, on the paths a test
// drives; this finds those no test drives, in every package, a transport
// added later among them.
func TestNoDurationAttrsInSource(t *testing.T) {
	t.Parallel()
	root := "../.."
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin" || n == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "slog" && (sel.Sel.Name == "Duration" || sel.Sel.Name == "DurationValue") {
				found = append(found, fset.Position(sel.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: slog.Duration logs bare nanoseconds in JSON: use slog.String(key, d.String())", f)
	}
}
