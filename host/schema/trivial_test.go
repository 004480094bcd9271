package schema

import (
	"slices"
	"testing"
)

// trivialDocs are documents the shortcut of the schemas every object (or
// every document) meets must judge as the full check does.
var trivialDocs = []string{
	`{}`, ` {"a":1} `, "\n\t{\"a\":[1,2,{}]}", `[]`, `"x"`, `1`, `null`, `true`,
	`{`, `{"a":}`, `{} {}`, `{}x`, ``, ` `, `{"a":"\xff"}`, `{"a":1,"a":2}`,
	`{"n":123456789012345678901234567890}`, `{"a":"\ud800"}`,
}

// TestTrivialSchemasShortcut: for {}, true and {"type":"object"}, Problems
// answers what the full check (decode and validate) answers, for valid and
// invalid documents alike; other schemas take no shortcut.
func TestTrivialSchemasShortcut(t *testing.T) {
	for raw, want := range map[string][2]bool{
		`{}`: {true, false}, `true`: {true, false}, ` { "type" : "object" } `: {false, true},
		`{"type":"object","required":["a"]}`: {}, `{"type":"array"}`: {}, `false`: {},
	} {
		s, err := Compile([]byte(raw))
		if err != nil {
			t.Fatal(raw, err)
		}
		if s.any != want[0] || s.object != want[1] {
			t.Errorf("%s: any %v object %v, want %v", raw, s.any, s.object, want)
		}
		full := &Schema{s: s.s}
		for _, doc := range trivialDocs {
			got, exp := s.Problems([]byte(doc), Limits{}), full.Problems([]byte(doc), Limits{})
			if !slices.Equal(got, exp) {
				t.Errorf("schema %s, doc %q: %q, the full check %q", raw, doc, got, exp)
			}
		}
	}
}

// FuzzTrivialSchemasShortcut: the shortcut and the full check agree on any
// document.
func FuzzTrivialSchemasShortcut(f *testing.F) {
	for _, doc := range trivialDocs {
		f.Add([]byte(doc))
	}
	obj, err := Compile([]byte(`{"type":"object"}`))
	if err != nil {
		f.Fatal(err)
	}
	anything, err := Compile([]byte(`{}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		for _, s := range []*Schema{obj, anything} {
			if got, exp := s.Problems(doc, Limits{}), (&Schema{s: s.s}).Problems(doc, Limits{}); !slices.Equal(got, exp) {
				t.Fatalf("doc %q: %q, the full check %q", doc, got, exp)
			}
		}
	})
}
