package main

import (
	"fmt"
	"go/constant"
	"go/types"
	"strings"
	"time"
)

// features returns the listing lines of one exported package-level object.
func features(pkg *types.Package, obj types.Object) []string {
	p := printer{pkg: pkg}
	switch obj := obj.(type) {
	case *types.Const:
		return []string{"const " + obj.Name() + " " + p.typ(obj.Type()) + " = " + constValue(obj)}
	case *types.Var:
		return []string{"var " + obj.Name() + " " + p.typ(obj.Type())}
	case *types.Func:
		sig := obj.Type().(*types.Signature)
		return []string{"func " + obj.Name() + p.typeParams(sig.TypeParams()) + p.signature(sig)}
	case *types.TypeName:
		return p.typeName(obj)
	}
	return nil
}

// constValue prints a constant's exact value, and a time.Duration as a
// duration ("30s") rather than nanoseconds.
func constValue(c *types.Const) string {
	if named, ok := c.Type().(*types.Named); ok && named.Obj().Pkg() != nil &&
		named.Obj().Pkg().Path() == "time" && named.Obj().Name() == "Duration" {
		if ns, exact := constant.Int64Val(c.Val()); exact {
			return time.Duration(ns).String()
		}
	}
	return c.Val().ExactString()
}

type printer struct {
	pkg *types.Package
}

// qualifier names another package by its name (as code that imports it
// does) and this package not at all.
func (p printer) qualifier(other *types.Package) string {
	if other == p.pkg {
		return ""
	}
	return other.Name()
}

// typ prints a type, with the function types in it printed without
// parameter names (in composite types and interface literals too).
func (p printer) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + p.signature(t)
	case *types.Pointer:
		return "*" + p.typ(t.Elem())
	case *types.Slice:
		return "[]" + p.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), p.typ(t.Elem()))
	case *types.Map:
		return "map[" + p.typ(t.Key()) + "]" + p.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + p.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + p.typ(t.Elem())
		}
		return "chan " + p.typ(t.Elem())
	case *types.Interface:
		if t.NumExplicitMethods() == 0 || t.IsImplicit() {
			break
		}
		var parts []string
		for i := range t.NumEmbeddeds() {
			parts = append(parts, p.typ(t.EmbeddedType(i)))
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			parts = append(parts, m.Name()+p.signature(m.Type().(*types.Signature)))
		}
		return "interface{" + strings.Join(parts, "; ") + "}"
	}
	return types.TypeString(t, p.qualifier)
}

func (p printer) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	parts := make([]string, tps.Len())
	for i := range tps.Len() {
		tp := tps.At(i)
		parts[i] = tp.Obj().Name() + " " + p.typ(tp.Constraint())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature prints "(params) results" with the parameters' types only.
func (p printer) signature(sig *types.Signature) string {
	params := make([]string, sig.Params().Len())
	for i := range params {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == len(params)-1 {
			params[i] = "..." + p.typ(t.(*types.Slice).Elem())
		} else {
			params[i] = p.typ(t)
		}
	}
	s := "(" + strings.Join(params, ", ") + ")"
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		s += " " + p.typ(res.At(0).Type())
	default:
		results := make([]string, res.Len())
		for i := range results {
			results[i] = p.typ(res.At(i).Type())
		}
		s += " (" + strings.Join(results, ", ") + ")"
	}
	return s
}

func (p printer) typeName(obj *types.TypeName) []string {
	if obj.IsAlias() {
		return []string{"type " + obj.Name() + " = " + p.typ(types.Unalias(obj.Type()))}
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return []string{"type " + obj.Name() + " " + p.typ(obj.Type().Underlying())}
	}
	head := "type " + obj.Name() + p.typeParams(named.TypeParams())
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, head+" struct")
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case f.Embedded():
				lines = append(lines, head+" struct, embedded "+p.typ(f.Type()))
			case f.Exported():
				lines = append(lines, head+" struct, "+f.Name()+" "+p.typ(f.Type()))
			}
		}
	case *types.Interface:
		lines = append(lines, head+" interface")
		for i := range u.NumEmbeddeds() {
			lines = append(lines, head+" interface, embedded "+p.typ(u.EmbeddedType(i)))
		}
		for i := range u.NumExplicitMethods() {
			m := u.ExplicitMethod(i)
			if m.Exported() {
				lines = append(lines, head+" interface, "+m.Name()+p.signature(m.Type().(*types.Signature)))
			} else {
				// An unexported method means only this package can
				// implement the interface: worth seeing if it changes.
				lines = append(lines, head+" interface, unexported methods")
			}
		}
	default:
		lines = append(lines, head+" "+p.typ(u))
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := obj.Name()
		if tps := sig.RecvTypeParams(); tps.Len() > 0 {
			names := make([]string, tps.Len())
			for j := range names {
				names[j] = tps.At(j).Obj().Name()
			}
			recv += "[" + strings.Join(names, ", ") + "]"
		}
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + recv
		}
		lines = append(lines, "method ("+recv+") "+m.Name()+p.signature(sig))
	}
	return lines
}
