package schema_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/schema"
)

// TestProblems: one rendering of what is wrong, whoever checks — the root
// is "/", format is asserted, an anyOf is one line of alternatives, the
// count is bounded with a line for the rest, and a document too costly to
// check is refused unchecked.
func TestProblems(t *testing.T) {
	many := `{"type":"object","properties":{`
	doc := `{`
	for i := range 25 {
		if i > 0 {
			many += ","
			doc += ","
		}
		many += fmt.Sprintf(`"p%02d":{"type":"integer"}`, i)
		doc += fmt.Sprintf(`"p%02d":"x"`, i)
	}
	many += `}}`
	doc += `}`
	// Three recursive alternatives: checking a deep value tries every
	// branch at every level.
	recursive := `{"$defs":{"n":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array","prefixItems":[{"$ref":"#/$defs/n"}]},{"type":"array","contains":{"$ref":"#/$defs/n"}}]}},"$ref":"#/$defs/n"}`
	deep := strings.Repeat("[", 30) + strings.Repeat("]", 30)
	for _, tc := range []struct {
		name, schema, doc string
		lim               schema.Limits
		want              []string
	}{
		{"valid", `{"type":"object"}`, `{}`, schema.Limits{}, nil},
		{"root", `{"type":"object"}`, `[1]`, schema.Limits{}, []string{"/: got array, want object"}},
		{"not JSON", `{}`, `{`, schema.Limits{}, []string{"/: not valid JSON: "}},
		{"pointer escapes", `{"properties":{"a/b~c":{"type":"string"}}}`, `{"a/b~c":1}`, schema.Limits{}, []string{"/a~1b~0c: got number, want string"}},
		{"format", `{"properties":{"to":{"type":"string","format":"email"}}}`, `{"to":"nobody"}`, schema.Limits{}, []string{"/to: 'nobody' is not valid email"}},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `true`, schema.Limits{}, []string{"/: 'anyOf' failed (got boolean, want string; or got boolean, want integer)"}},
		{"bounded", many, doc, schema.Limits{}, []string{"(and 5 more problems)"}},
		{"bounded lower", many, doc, schema.Limits{MaxProblems: 2}, []string{"/p00: ", "/p01: ", "(and 23 more problems)"}},
		{"too complex", recursive, deep, schema.Limits{MaxSteps: 10_000}, []string{"/: too complex to check against the schema: more than 10000 validation steps"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := schema.Compile(json.RawMessage(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			got := s.Problems([]byte(tc.doc), tc.lim)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("problems %q, want none", got)
				}
				return
			}
			if tc.name == "bounded" {
				if len(got) != schema.DefaultMaxProblems+1 || got[len(got)-1] != tc.want[0] {
					t.Fatalf("%d problems, last %q", len(got), got[len(got)-1])
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("problem %d: %q, want it to start with %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestCompileRefuses: schemas whose check the host cannot bound or that
// reach outside themselves do not compile, with a one-line reason.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{`, "not JSON"},
		{`{"$ref":"file:///etc/passwd"}`, "external references are not supported"},
		{`{"$ref":"https://example.com/s.json"}`, "external references are not supported"},
		{`{"$dynamicAnchor":"n","properties":{"a":{"$dynamicRef":"#n"}}}`, "uses $dynamicRef"},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"properties":{"a":{"$recursiveRef":"#"}}}`, "uses $recursiveRef"},
		{`{"type":"nonsense"}`, "not valid against metaschema"},
	} {
		_, err := schema.Compile(json.RawMessage(tc.schema))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error with %q", tc.schema, err, tc.want)
		}
	}
}
