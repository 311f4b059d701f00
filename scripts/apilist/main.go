// Command apilist writes the exported API of the module's public packages
// into a directory, one file per package, so that a change to the API shows
// in review as a change to a committed file.
//
//	go run ./scripts/apilist          # rewrite api/ (what `make api` runs)
//	go run ./scripts/apilist -o DIR   # write elsewhere (what `make test` compares)
//
// A public package is one a user can import: not under an internal/
// directory, not a main package, not under cmd/, examples/ or scripts/,
// and with at least one non-test file. Each line of a listing names one feature (a constant, a
// variable, a function, a type, a struct field, an interface method or a
// method), in the shape of the Go project's own api/*.txt files: parameter
// names are left out because renaming a parameter changes no caller. Lines
// are sorted, so the output depends only on the code.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	out := flag.String("o", "api", "directory to write the listings into; files for packages that no longer exist are removed")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedTypes | packages.NeedModule}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return fmt.Errorf("error loading packages: %w", err)
	}
	listings := map[string][]string{}
	for _, pkg := range pkgs {
		if !public(pkg) {
			continue
		}
		if len(pkg.Errors) > 0 {
			return fmt.Errorf("error type-checking %s: %v", pkg.PkgPath, pkg.Errors[0])
		}
		listings[fileName(pkg)] = list(pkg)
	}
	if len(listings) == 0 {
		return fmt.Errorf("no public packages found under %s (run from the module root)", mustGetwd())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(out, "*.txt"))
	if err != nil {
		return err
	}
	for _, path := range old {
		if _, keep := listings[filepath.Base(path)]; !keep {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	for name, lines := range listings {
		if err := os.WriteFile(filepath.Join(out, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func public(pkg *packages.Package) bool {
	if pkg.Module == nil || pkg.Name == "main" || len(pkg.GoFiles) == 0 {
		return false
	}
	rel := relPath(pkg)
	for _, seg := range strings.Split(rel, "/") {
		if seg == "internal" || seg == "testdata" {
			return false
		}
	}
	for _, dir := range []string{"cmd", "examples", "scripts"} {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return false
		}
	}
	return true
}

// relPath is the package's path inside the module, "." for the root.
func relPath(pkg *packages.Package) string {
	if pkg.PkgPath == pkg.Module.Path {
		return "."
	}
	return strings.TrimPrefix(pkg.PkgPath, pkg.Module.Path+"/")
}

// fileName names a package's listing after its path inside the module, with
// "/" as "_"; the root package's listing is named after the package.
func fileName(pkg *packages.Package) string {
	rel := relPath(pkg)
	if rel == "." {
		rel = pkg.Name
	}
	return strings.ReplaceAll(rel, "/", "_") + ".txt"
}

func list(pkg *packages.Package) []string {
	var lines []string
	scope := pkg.Types.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		lines = append(lines, features(pkg.Types, obj)...)
	}
	slices.Sort(lines)
	return append([]string{"pkg " + pkg.PkgPath, ""}, slices.Compact(lines)...)
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}
