package file

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzSplitArray: for a valid JSON array of one element or more,
// splitArray finds the elements encoding/json finds, escapes and nesting
// included.
func FuzzSplitArray(f *testing.F) {
	for _, s := range []string{
		`[{"a":"b"}]`,
		`[{"a":"b\"]"},{"c":["d",{"e":"\\"}]}]`,
		`[{"t":"a \\\" b"}, {"u":"]"} ]`,
		`["\\\\",1,null]`,
		`[[],{}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want []json.RawMessage
		if json.Unmarshal(data, &want) != nil || len(want) == 0 || data[0] != '[' {
			return
		}
		got, err := splitArray(data)
		if err != nil {
			t.Fatalf("splitArray(%q): %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("splitArray(%q): %d elements, want %d", data, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(bytes.TrimSpace(got[i]), bytes.TrimSpace(want[i])) {
				t.Fatalf("splitArray(%q): element %d is %q, want %q", data, i, got[i], want[i])
			}
		}
	})
}
