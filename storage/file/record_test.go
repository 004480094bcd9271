package file

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/storagetest"
)

// FuzzDecodeRecord checks decodeRecord, and its hand-written array
// splitter, against encoding/json: a record it accepts is valid JSON, one
// event or a non-empty array of events, and decodes to the same events.
func FuzzDecodeRecord(f *testing.F) {
	evs := storagetest.EveryKind("run-rec")
	one, err := encodeRecord(evs[:1])
	if err != nil {
		f.Fatal(err)
	}
	all, err := encodeRecord(evs)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(one[:len(one)-1])
	f.Add(all[:len(all)-1])
	f.Add(all[:len(all)/2])
	for _, s := range []string{"[]", "[ ]", "[,]", "[{}]", `[{"a":"]"}]`, `["\"",{}]`, "[[]]", "[{]}", "[{} {}]", "[{}]x", "[{},]", `[{"v":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		got, err := decodeRecord(nil, rec)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("decodeRecord failed (%v) but returned %d events", err, len(got))
			}
			return
		}
		var want []ledger.Event
		if e, err := ledger.Decode(rec); err == nil {
			want = []ledger.Event{e}
		} else {
			var raws []json.RawMessage
			if err := json.Unmarshal(rec, &raws); err != nil {
				t.Fatalf("decodeRecord accepted %q, which is not a JSON array: %v", rec, err)
			}
			for _, r := range raws {
				e, err := ledger.Decode(r)
				if err != nil {
					t.Fatalf("decodeRecord accepted %q, whose element %q does not decode: %v", rec, r, err)
				}
				want = append(want, e)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeRecord(%q) = %d events, encoding/json finds %d", rec, len(got), len(want))
		}
	})
}
