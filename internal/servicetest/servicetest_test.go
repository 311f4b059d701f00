package servicetest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryServiceRunsTheContract finds every type in the module with a
// Stop(ctx context.Context) error method and fails for each that no test
// runs the lifecycle contract against (servicetest.Run with the type's
// package-qualified name).
func TestEveryServiceRunsTheContract(t *testing.T) {
	t.Parallel()
	// Types with a Stop(ctx) method that are not a queue.Service, and why.
	notServices := map[string]string{
		"queue.Runtime": "the container that starts and stops the services, not one of them",
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	fset := token.NewFileSet()
	services := map[string]string{} // "pkg.Type" -> where its Stop is
	contracts := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			for name := range contractsRun(f) {
				contracts[name] = true
			}
			return nil
		}
		for _, decl := range f.Decls {
			if typ, ok := stopMethodReceiver(decl); ok {
				rel, _ := filepath.Rel(root, fset.Position(decl.Pos()).String())
				services[f.Name.Name+"."+typ] = rel
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, services, "the scan found no service at all: is the module root right?")

	var missing []string
	for name, where := range services {
		if _, ok := notServices[name]; !ok && !contracts[name] {
			missing = append(missing, name+" ("+where+")")
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "these services run no lifecycle contract: add servicetest.Run(t, %q, ...) to their package's tests", "pkg.Type")
}

// stopMethodReceiver returns the receiver type of a method
// Stop(context.Context) error.
func stopMethodReceiver(decl ast.Decl) (string, bool) {
	fn, ok := decl.(*ast.FuncDecl)
	if !ok || fn.Recv == nil || fn.Name.Name != "Stop" {
		return "", false
	}
	params, results := fn.Type.Params.List, fn.Type.Results
	if len(params) != 1 || results == nil || len(results.List) != 1 || exprString(params[0].Type) != "context.Context" || exprString(results.List[0].Type) != "error" {
		return "", false
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	id, ok := recv.(*ast.Ident)
	return id.Name, ok
}

// contractsRun returns the type names given to servicetest.Run in f.
func contractsRun(f *ast.File) map[string]bool {
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || exprString(call.Fun) != "servicetest.Run" || len(call.Args) < 2 {
			return true
		}
		if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if name, err := strconv.Unquote(lit.Value); err == nil {
				out[name] = true
			}
		}
		return true
	})
	return out
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return ""
}
