package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFeatures(t *testing.T) {
	t.Parallel()

	const src = `package p

import (
	"context"
	"time"
)

const Timeout = 30 * time.Second
const Name = "n"

var ErrGone error

type State string

type Handler func(ctx context.Context, payload []byte) error

type Store[T any] struct {
	Items []T
	Limit int
	inner int
	*Embedded
}

type Embedded struct{}

func (s *Store[T]) Put(ctx context.Context, items ...T) (int, error) { return 0, nil }
func (s Store[T]) Len() int                                          { return 0 }
func (s Store[T]) grow()                                             {}

type Sealed interface {
	Name() string
	sealed()
}

type Alias = State

func New[T any](limit int) *Store[T] { return nil }

func Read(db interface {
	Begin(ctx context.Context) (Sealed, error)
}, fns []func(ctx context.Context) error, ch <-chan map[string]*[2]func(n int)) {
}

func hidden() {}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/p", fset, []*ast.File{file}, nil)
	require.NoError(t, err)

	var lines []string
	for _, name := range pkg.Scope().Names() {
		if obj := pkg.Scope().Lookup(name); obj.Exported() {
			lines = append(lines, features(pkg, obj)...)
		}
	}
	slices.Sort(lines)
	require.Equal(t, []string{
		`const Name untyped string = "n"`,
		`const Timeout time.Duration = 30s`,
		`func New[T any](int) *Store[T]`,
		`func Read(interface{Begin(context.Context) (Sealed, error)}, []func(context.Context) error, <-chan map[string]*[2]func(int))`,
		`method (*Store[T]) Put(context.Context, ...T) (int, error)`,
		`method (Store[T]) Len() int`,
		`type Alias = State`,
		`type Embedded struct`,
		`type Handler func(context.Context, []byte) error`,
		`type Sealed interface`,
		`type Sealed interface, Name() string`,
		`type Sealed interface, unexported methods`,
		`type State string`,
		`type Store[T any] struct`,
		`type Store[T any] struct, Items []T`,
		`type Store[T any] struct, Limit int`,
		`type Store[T any] struct, embedded *Embedded`,
		`var ErrGone error`,
	}, lines)
}
