package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Sidecar is the manifest that makes a plain Extism module (one without a
// describe export) usable as tools: it sits beside the module as NAME.json
// for NAME.wasm. Its tools call the named export with the tool's input
// (the model's JSON arguments) and return the export's output as text.
//
// The file holds one tool:
//
//	{"name": "count_vowels", "description": "Count the vowels of a text.",
//	 "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
//	 "export": "count_vowels", "input_field": "text",
//	 "effect": "read", "idempotent": true, "timeout_ms": 1000}
//
// or several: {"tools": [ … ]}. Unknown fields are errors, so a typo
// cannot silently drop a setting. effect and export are required;
// input_field (the member of the input passed to the export as its raw
// input) is optional: without it the export gets the whole input JSON.
//
// Either form may say what the module needs of its sandbox (see [Needs]),
// beside the tool or the tools:
//
//	"needs": {"allowed_hosts": ["api.example.com"], "kv": true}
type Sidecar struct {
	// Tools are the tools the manifest describes; each names its Export.
	Tools []ToolDescription
	// Needs is what the module needs of its sandbox; nil: not said.
	Needs *Needs
}

// ParseSidecar decodes a sidecar manifest. The tools are validated when
// the module loads (their exports must exist).
func ParseSidecar(data []byte) (*Sidecar, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: sidecar manifest: %v", ErrInvalidDescription, err)
	}
	strict := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("%w: sidecar manifest: %v", ErrInvalidDescription, err)
		}
		return nil
	}
	if _, ok := probe["tools"]; ok {
		var many struct {
			Tools []ToolDescription `json:"tools"`
			Needs *Needs            `json:"needs"`
		}
		if err := strict(&many); err != nil {
			return nil, err
		}
		return &Sidecar{Tools: many.Tools, Needs: many.Needs}, nil
	}
	var one struct {
		ToolDescription
		Needs *Needs `json:"needs"`
	}
	if err := strict(&one); err != nil {
		return nil, err
	}
	return &Sidecar{Tools: []ToolDescription{one.ToolDescription}, Needs: one.Needs}, nil
}

func (s *Sidecar) description() Description {
	d := Description{ABI: ABIVersion, Tools: append([]ToolDescription(nil), s.Tools...)}
	if s.Needs != nil {
		n := *s.Needs
		n.AllowedHosts = slices.Clone(n.AllowedHosts)
		d.Needs = &n
	}
	return d
}

// MarshalJSON writes the manifest in its several-tools form, which
// [ParseSidecar] reads back as the same manifest.
func (s *Sidecar) MarshalJSON() ([]byte, error) {
	// A tool without a schema has none in the file either (null would
	// read back as a schema).
	type tool struct {
		ToolDescription
		InputSchema json.RawMessage `json:"input_schema,omitempty"`
	}
	tools := make([]tool, len(s.Tools))
	for i, t := range s.Tools {
		tools[i] = tool{t, t.InputSchema}
	}
	return json.Marshal(struct {
		Tools []tool `json:"tools"`
		Needs *Needs `json:"needs,omitempty"`
	}{tools, s.Needs})
}
