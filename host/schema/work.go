package schema

import (
	"reflect"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Checking a value against a JSON Schema can take time exponential in the
// value's depth: a schema whose $ref recursion passes through several
// anyOf branches makes the validator try every branch at every level (a
// plugin's schema of three such branches and a value nested 22 deep ran
// for minutes and took gigabytes). The validator cannot be interrupted, so
// the work is estimated before it runs, and a value whose check would cost
// more than the caller allows (Limits.MaxSteps) is refused unchecked.

// schemaWork returns an upper bound of the steps the validator takes to
// check v (a value of jsonschema.UnmarshalJSON) against sch, or a number
// above limit as soon as the bound passes limit. A step is one subschema
// applied to one value (each branch of allOf, anyOf and oneOf counted,
// whether or not another matched; each $ref followed), plus the
// keyword work of that application that grows with the value or the
// schema: a member or item visited, a required name, an enum or const
// comparison, uniqueItems, a pattern or format run over a string.
//
// Pairs of subschema and value are memoized, so the estimate costs time
// and memory in proportion to the distinct pairs (at most limit of them),
// never to their possibly exponential count.
func schemaWork(sch *jsonschema.Schema, v any, limit int64) int64 {
	e := &workEstimator{limit: limit, memo: map[workKey]int64{}, consts: map[*jsonschema.Schema]int64{}}
	return e.work(sch, v)
}

type workEstimator struct {
	limit  int64
	memo   map[workKey]int64
	consts map[*jsonschema.Schema]int64 // the cost of a schema's enum and const comparisons
}

// workKey is a subschema applied to a value. Objects and arrays are told
// apart by identity; scalars by kind and (strings) length, the only
// properties of a scalar the estimate depends on.
type workKey struct {
	sch  *jsonschema.Schema
	ptr  uintptr
	n    int
	kind byte
}

func keyOf(sch *jsonschema.Schema, v any) workKey {
	switch x := v.(type) {
	case map[string]any:
		return workKey{sch, uintptr(reflect.ValueOf(x).UnsafePointer()), len(x), 'o'}
	case []any:
		return workKey{sch, uintptr(reflect.ValueOf(x).UnsafePointer()), len(x), 'a'}
	case string:
		return workKey{sch: sch, n: len(x), kind: 's'}
	}
	return workKey{sch: sch, kind: 'x'}
}

func (e *workEstimator) work(sch *jsonschema.Schema, v any) int64 {
	if sch == nil {
		return 0
	}
	k := keyOf(sch, v)
	if w, ok := e.memo[k]; ok {
		return w
	}
	if int64(len(e.memo)) >= e.limit {
		return e.limit + 1
	}
	// A cycle back to this pair counts once: the validator stops at
	// cycles with an error.
	e.memo[k] = 1
	w := int64(1)
	over := func() bool { return w > e.limit }
	add := func(n int64) {
		if w += n; w > e.limit {
			w = e.limit + 1
		}
	}
	// Subschemas applied to the value itself.
	inPlace := []*jsonschema.Schema{sch.Ref, sch.RecursiveRef, sch.Not, sch.If, sch.Then, sch.Else}
	if sch.DynamicRef != nil {
		inPlace = append(inPlace, sch.DynamicRef.Ref)
	}
	inPlace = append(inPlace, sch.AllOf...)
	inPlace = append(inPlace, sch.AnyOf...)
	inPlace = append(inPlace, sch.OneOf...)
	for _, sub := range inPlace {
		if add(e.work(sub, v)); over() {
			break
		}
	}
	if sch.Enum != nil || sch.Const != nil {
		add(e.constWork(sch))
	}
	switch x := v.(type) {
	case map[string]any:
		add(int64(len(sch.Required)))
		additional, _ := sch.AdditionalProperties.(*jsonschema.Schema)
		for key, child := range x {
			if over() {
				break
			}
			add(1)
			add(e.work(sch.Properties[key], child))
			for _, p := range sch.PatternProperties {
				add(1 + int64(len(key))/64)
				add(e.work(p, child))
			}
			add(e.work(additional, child))
			add(e.work(sch.UnevaluatedProperties, child))
			add(e.work(sch.PropertyNames, key))
			add(e.work(sch.DependentSchemas[key], v))
			if dep, ok := sch.Dependencies[key].(*jsonschema.Schema); ok {
				add(e.work(dep, v))
			}
			add(int64(len(sch.DependentRequired[key])))
		}
	case []any:
		n := int64(len(x))
		if sch.UniqueItems {
			add(n * n)
		}
		additional, _ := sch.AdditionalItems.(*jsonschema.Schema)
		for i, child := range x {
			if over() {
				break
			}
			add(1)
			if i < len(sch.PrefixItems) {
				add(e.work(sch.PrefixItems[i], child))
			}
			add(e.work(sch.Items2020, child))
			switch items := sch.Items.(type) {
			case *jsonschema.Schema:
				add(e.work(items, child))
			case []*jsonschema.Schema:
				if i < len(items) {
					add(e.work(items[i], child))
				}
			}
			add(e.work(additional, child))
			add(e.work(sch.Contains, child))
			add(e.work(sch.UnevaluatedItems, child))
		}
	case string:
		if sch.Pattern != nil || sch.Format != nil {
			add(1 + int64(len(x))/64)
		}
	}
	e.memo[k] = w
	return w
}

// constWork is the cost of comparing a value with a schema's enum values
// and const: at most the size of each.
func (e *workEstimator) constWork(sch *jsonschema.Schema) int64 {
	if w, ok := e.consts[sch]; ok {
		return w
	}
	var w int64
	if sch.Enum != nil {
		for _, v := range sch.Enum.Values {
			w += valueSize(v)
		}
	}
	if sch.Const != nil {
		w += valueSize(*sch.Const)
	}
	e.consts[sch] = w
	return w
}

// valueSize counts the nodes of a value.
func valueSize(v any) int64 {
	n := int64(1)
	switch x := v.(type) {
	case map[string]any:
		for _, c := range x {
			n += valueSize(c)
		}
	case []any:
		for _, c := range x {
			n += valueSize(c)
		}
	}
	return n
}
