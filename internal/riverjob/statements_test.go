package riverjob_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
)

// TestStatementsListed keeps riverjob.Statements complete: every constant of
// the package whose name ends in SQL is in it, so TestEveryStatementPrepares
// runs all of them.
func TestStatementsListed(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var consts []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasSuffix(id.Name, "SQL") {
						consts = append(consts, id.Name)
					}
				}
			}
		}
	}
	listed := riverjob.Statements()
	for _, name := range consts {
		require.Contains(t, listed, name, "statement %s is missing from riverjob.Statements (statements_export_test.go)", name)
	}
	for name := range listed {
		require.True(t, slices.Contains(consts, name) || strings.HasPrefix(name, "("),
			"riverjob.Statements lists %s, which is not a constant of the package", name)
	}
}

// TestEveryStatementPrepares prepares each of the package's statements in a
// schema migrated with River's migrations at the pinned version: Postgres
// parses it and resolves every table, column, type and operator it names,
// so a River upgrade that renames or retypes any of them fails here. A COPY,
// which cannot be prepared, runs instead with no rows in a transaction that
// is rolled back (the rows' encoding is the insert tests' to check).
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	stmts := riverjob.Statements()
	names := make([]string, 0, len(stmts))
	for name := range stmts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sql := db.Q(stmts[name])
		if strings.HasPrefix(sql, "COPY ") {
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			noRows := "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00\x00\x00\x00\x00" + "\xff\xff"
			_, err = tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(noRows), sql)
			require.NoError(t, err, "statement %s", name)
			require.NoError(t, tx.Rollback(ctx))
			continue
		}
		_, err := conn.Conn().Prepare(ctx, "", sql)
		require.NoError(t, err, "statement %s", name)
	}
}

// riverObject matches a name of River's schema objects as SQL or a channel
// name writes it: its tables (river_job, river_queue, river_leader,
// river_client, river_client_queue, river_migration), types and indexes
// (river_job_state, ...) and its insert channel (river_insert), after a
// schema marker, a schema and a dot, a cast, or a keyword that takes a
// table (FROM river_job, UPDATE river_job, ...). Prose that mentions a
// table ("river_job rows to seed") is not SQL and is left alone.
var riverObject = regexp.MustCompile(`(?i)(/\*schema\*/|\.|::|\b(from|join|into|update|table|only|truncate|analyze|vacuum|listen|notify)\s+)river_[a-z][a-z_]*`)

// riverIdentifier matches a string that is just such a name, as handed to
// pgx.Identifier or a channel's concatenation.
var riverIdentifier = regexp.MustCompile(`^[.]?river_[a-z][a-z_]*$`)

// TestRiverTablesOwnedHere fails for every string in a non-test Go file of
// the module, outside this package, that names one of River's tables, types
// or channels: SQL on River's tables lives here, next to a test that runs it
// against River's migrations. Comments are not strings and migration SQL
// files are history; both are left alone.
func TestRiverTablesOwnedHere(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module root is two levels up")
	self, err := filepath.Abs(".")
	require.NoError(t, err)

	fset := token.NewFileSet()
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == self || (path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			value, err := strconv.Unquote(lit.Value)
			if err != nil {
				value = lit.Value
			}
			m := riverObject.FindString(value)
			if m == "" && riverIdentifier.MatchString(value) {
				m = value
			}
			if m != "" {
				pos := fset.Position(lit.Pos())
				rel, _ := filepath.Rel(root, pos.Filename)
				found = append(found, rel+":"+strconv.Itoa(pos.Line)+": "+m)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "SQL or a channel naming River's tables outside internal/riverjob; move it into a riverjob function:\n%s", strings.Join(found, "\n"))
}
