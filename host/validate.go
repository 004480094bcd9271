package host

import (
	"bytes"
	"context"
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

// Validator checks a task's deliverable (see [Host.Task]). The host calls it
// inside the submit_deliverable tool call, so that what it finds goes back
// to the model, which may fix its submission and submit again.
//
// Validate returns, for a deliverable (the JSON value the model submitted):
//
//   - value: the accepted deliverable, possibly normalised by the validator;
//     nil means the deliverable as submitted. Used only when problems is
//     empty and err is nil.
//   - problems: what is wrong with the deliverable, one model-fixable
//     "path: message" line each, path a JSON Pointer into the deliverable
//     ("/" for the deliverable itself). Non-empty means rejected: the model
//     sees the lines as the tool's error result.
//   - err: the validator itself failed (a plugin crashed, a resource it
//     needs is unreachable). The deliverable is neither accepted nor
//     rejected: the model is told that the validation could not run and is
//     asked to submit again, and the task goes on (bounded by the agent's
//     MaxSteps). A panic in Validate is treated the same way.
//
// Validate may be called concurrently by different tasks. [SchemaValidator]
// is the default; Wasm validator plugins implement the same interface.
type Validator interface {
	Validate(ctx context.Context, deliverable json.RawMessage) (value json.RawMessage, problems []string, err error)
}

// maxProblems bounds the problems a [SchemaValidator] reports at once; the
// rest are summarised in one more line.
const maxProblems = 20

// schemaResource is the URL the compiled schema is known by. Relative
// references ("#/$defs/x") resolve against it.
const schemaResource = "urn:agentic:deliverable"

// SchemaValidator returns a [Validator] that checks a deliverable against a
// JSON Schema. The schema is compiled once, here; a schema that does not
// compile is an error. Schemas without "$schema" are read as draft 2020-12,
// "format" is asserted (an "email" that is not one is a problem), and
// references to other documents are refused: the schema must be
// self-contained ("$defs" are fine).
//
// Problems come as "path: message" lines, path a JSON Pointer into the
// deliverable ("/" for its root), one line per failed leaf keyword, at most
// 20 (then a line tells how many more there were).
func SchemaValidator(schema json.RawMessage) (Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("host: the deliverable schema is not valid JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaResource, doc); err != nil {
		return nil, fmt.Errorf("host: the deliverable schema: %v", err)
	}
	sch, err := c.Compile(schemaResource)
	if err != nil {
		return nil, fmt.Errorf("host: the deliverable schema does not compile: %v", err)
	}
	return &schemaValidator{schema: sch}, nil
}

// noLoader refuses every external reference: a deliverable schema is
// self-contained, and the host reads no file or URL on its behalf.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external references are not supported (%s): inline it under $defs", url)
}

type schemaValidator struct {
	schema *jsonschema.Schema
}

var printer = message.NewPrinter(language.English)

func (v *schemaValidator) Validate(_ context.Context, deliverable json.RawMessage) (json.RawMessage, []string, error) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(deliverable))
	if err != nil {
		return nil, []string{"/: not valid JSON: " + err.Error()}, nil
	}
	err = v.schema.Validate(inst)
	if err == nil {
		var buf bytes.Buffer
		if json.Compact(&buf, deliverable) != nil {
			return deliverable, nil, nil
		}
		return buf.Bytes(), nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, nil, err
	}
	var problems []string
	flattenProblems(ve, &problems)
	if len(problems) == 0 { // no leaf: report the error itself
		problems = append(problems, pointer(ve.InstanceLocation)+": "+ve.ErrorKind.LocalizedString(printer))
	}
	problems = slices.Compact(problems)
	if n := len(problems); n > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("(and %d more problems)", n-maxProblems))
	}
	return nil, problems, nil
}

// flattenProblems appends a "path: message" line for every leaf of the
// error tree. The inner nodes (the schema, references, groups, allOf…) only
// say that their children failed; an anyOf or oneOf gets one line that
// lists its alternatives' failures.
func flattenProblems(e *jsonschema.ValidationError, out *[]string) {
	if len(e.Causes) == 0 {
		if _, ok := e.ErrorKind.(*kind.Schema); ok {
			return
		}
		*out = append(*out, pointer(e.InstanceLocation)+": "+e.ErrorKind.LocalizedString(printer))
		return
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		// One line for the alternatives, lest the model read them as
		// requirements that all hold.
		at := pointer(e.InstanceLocation)
		var alts []string
		for _, c := range e.Causes {
			flattenProblems(c, &alts)
		}
		for i, a := range alts {
			alts[i] = strings.TrimPrefix(a, at+": ")
		}
		*out = append(*out, at+": "+e.ErrorKind.LocalizedString(printer)+" ("+strings.Join(alts, "; or ")+")")
		return
	}
	for _, c := range e.Causes {
		flattenProblems(c, out)
	}
}

// pointer renders an instance location as a JSON Pointer, "/" for the root.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}

var _ Validator = (*schemaValidator)(nil)
