// Package schema compiles JSON Schemas and checks documents against them,
// the one way the host (task deliverables) and plugins (tool inputs,
// validator deliverables) both do: draft 2020-12 unless the schema says
// otherwise, "format" asserted, no reference outside the schema, no
// $dynamicRef or $recursiveRef, the work of a check bounded before it
// runs, and problems reported as model-fixable "path: message" lines.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Root is the path of the whole document in problems: the JSON Pointer
// of the root, written so that a model (or a person) can read it.
const Root = "/"

// The defaults of [Limits].
const (
	// DefaultMaxProblems is how many problems a check reports at most;
	// one more line says how many more there were.
	DefaultMaxProblems = 20
	// DefaultMaxSteps bounds the estimated work of one check (see
	// [Limits.MaxSteps]).
	DefaultMaxSteps = 200_000
)

// Limits bound one check.
type Limits struct {
	// MaxProblems is how many problems are reported at most. Default (0):
	// DefaultMaxProblems.
	MaxProblems int
	// MaxSteps bounds the work of a check: a document whose check is
	// estimated to take more steps (a subschema applied to a value, plus
	// the keyword work that grows with the value) is not checked, and its
	// one problem says it is too complex. Checking can otherwise take time
	// exponential in the document's depth, and cannot be interrupted.
	// Default (0): DefaultMaxSteps.
	MaxSteps int64
}

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	s *jsonschema.Schema
	// any is set for a schema every JSON document meets ({} or true), and
	// object for {"type":"object"} (what a tool without a schema of its own
	// takes): a document they accept is checked without being decoded.
	any, object bool
}

// resource is the URL a compiled schema is known by; relative references
// ("#/$defs/x") resolve against it.
const resource = "urn:agentic:schema"

// Compile compiles a JSON Schema. Schemas without "$schema" are read as
// draft 2020-12; "format" is asserted (an "email" that is not one is a
// problem); references must stay inside the schema ("$defs" are fine, a
// file or URL is refused: the host reads none on a schema's behalf); and
// $dynamicRef and $recursiveRef are refused, as where they lead is known
// only while checking, so the cost of a check could not be bounded. The
// error is one line.
func Compile(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(resource, doc); err != nil {
		return nil, oneLine(err)
	}
	sch, err := c.Compile(resource)
	if err != nil {
		return nil, oneLine(err)
	}
	if kw := dynamicReference(sch); kw != "" {
		return nil, fmt.Errorf("uses %s, which is not supported: where it leads is known only while checking, so the cost of a check cannot be bounded before it runs", kw)
	}
	out := &Schema{s: sch}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		switch compact.String() {
		case `{}`, `true`:
			out.any = true
		case `{"type":"object"}`:
			out.object = true
		}
	}
	return out, nil
}

// noLoader refuses every external reference. The JSON Schema
// meta-schemas are built into the library.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external references are not supported (%s): inline it under $defs", url)
}

// Problems checks doc against the schema and returns what is wrong with
// it, one "path: message" line per failed leaf keyword (path a JSON
// Pointer into doc, [Root] for the whole of it; an anyOf or oneOf gets one
// line listing its alternatives), sorted, at most lim.MaxProblems of them
// and then a line telling how many more there were; nil when doc is valid.
func (s *Schema) Problems(doc []byte, lim Limits) []string {
	if lim.MaxProblems <= 0 {
		lim.MaxProblems = DefaultMaxProblems
	}
	if lim.MaxSteps <= 0 {
		lim.MaxSteps = DefaultMaxSteps
	}
	if (s.any || s.object) && json.Valid(doc) && (s.any || firstByte(doc) == '{') {
		return nil // what the full check would say, without decoding doc
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return []string{Root + ": not valid JSON: " + err.Error()}
	}
	if w := schemaWork(s.s, v, lim.MaxSteps); w > lim.MaxSteps {
		return []string{fmt.Sprintf("%s: too complex to check against the schema: more than %d validation steps (the limit)", Root, lim.MaxSteps)}
	}
	err = s.s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{Root + ": " + oneLine(err).Error()}
	}
	var problems []string
	flatten(ve, &problems)
	if len(problems) == 0 { // no leaf: report the error itself
		problems = append(problems, Pointer(ve.InstanceLocation)+": "+ve.ErrorKind.LocalizedString(printer))
	}
	// In a stable order (the validator's follows map iteration), each
	// once.
	slices.Sort(problems)
	problems = slices.Compact(problems)
	if n := len(problems); n > lim.MaxProblems {
		problems = append(problems[:lim.MaxProblems], fmt.Sprintf("(and %d more problems)", n-lim.MaxProblems))
	}
	return problems
}

// firstByte is doc's first byte that is not JSON white space, or 0.
func firstByte(doc []byte) byte {
	for _, c := range doc {
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

var printer = message.NewPrinter(language.English)

// flatten appends a "path: message" line for every leaf of the error
// tree. The inner nodes (the schema, references, groups, allOf…) only say
// that their children failed; an anyOf or oneOf gets one line that lists
// its alternatives' failures, lest the model read them as requirements
// that all hold.
func flatten(e *jsonschema.ValidationError, out *[]string) {
	if len(e.Causes) == 0 {
		if _, ok := e.ErrorKind.(*kind.Schema); ok {
			return
		}
		*out = append(*out, Pointer(e.InstanceLocation)+": "+e.ErrorKind.LocalizedString(printer))
		return
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		at := Pointer(e.InstanceLocation)
		var alts []string
		for _, c := range e.Causes {
			flatten(c, &alts)
		}
		for i, a := range alts {
			alts[i] = strings.TrimPrefix(a, at+": ")
		}
		*out = append(*out, at+": "+e.ErrorKind.LocalizedString(printer)+" ("+strings.Join(alts, "; or ")+")")
		return
	}
	for _, c := range e.Causes {
		flatten(c, out)
	}
}

// Pointer renders an instance location as a JSON Pointer, [Root] for the
// whole document.
func Pointer(tokens []string) string {
	if len(tokens) == 0 {
		return Root
	}
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}

// oneLine folds an error's text to one line of at most 500 bytes.
func oneLine(err error) error {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return errors.New(s)
}

// dynamicReference returns "$dynamicRef" or "$recursiveRef" when a schema
// reachable from sch uses one, "" otherwise.
func dynamicReference(sch *jsonschema.Schema) string {
	seen := map[*jsonschema.Schema]bool{}
	var walk func(s *jsonschema.Schema) string
	walk = func(s *jsonschema.Schema) string {
		if s == nil || seen[s] {
			return ""
		}
		seen[s] = true
		switch {
		case s.DynamicRef != nil:
			return "$dynamicRef"
		case s.RecursiveRef != nil:
			return "$recursiveRef"
		}
		subs := []*jsonschema.Schema{s.Ref, s.Not, s.If, s.Then, s.Else, s.PropertyNames, s.UnevaluatedProperties,
			s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
		subs = append(subs, s.AllOf...)
		subs = append(subs, s.AnyOf...)
		subs = append(subs, s.OneOf...)
		subs = append(subs, s.PrefixItems...)
		for _, p := range s.Properties {
			subs = append(subs, p)
		}
		for _, p := range s.PatternProperties {
			subs = append(subs, p)
		}
		for _, p := range s.DependentSchemas {
			subs = append(subs, p)
		}
		for _, d := range s.Dependencies {
			if p, ok := d.(*jsonschema.Schema); ok {
				subs = append(subs, p)
			}
		}
		for _, x := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
			switch p := x.(type) {
			case *jsonschema.Schema:
				subs = append(subs, p)
			case []*jsonschema.Schema:
				subs = append(subs, p...)
			}
		}
		for _, sub := range subs {
			if kw := walk(sub); kw != "" {
				return kw
			}
		}
		return ""
	}
	return walk(sch)
}
