package ledger

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// FuzzDecode checks the decoder at the trust boundary: it never panics,
// every error is a *DecodeError, and whatever it accepts re-encodes and
// decodes to a deeply equal event.
func FuzzDecode(f *testing.F) {
	var seeds []Event
	seeds = append(seeds, fullEvents()...)
	for _, sc := range [][]Event{chatScenario(), toolScenario(), cancelledScenario(), compactionScenario()} {
		seeds = append(seeds, sc...)
	}
	for _, e := range seeds {
		b, err := Encode(e)
		if err != nil {
			f.Fatalf("seed %s: %v", e.ID, err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"v":1}`,
		`{"v":2,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}}`,
		`{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}} {}`,
		`{"v":1,"id":"e1","kind":"step","time":"2025-01-01T00:00:00Z","run_id":"r","step":{"response_id":"x","usage":{"prompt_tokens":"1"}}}`,
		`{"v":1,"id":"e1","kind":"input","time":"2025-01-01T00:00:00+01:00","input":{"message_id":"m","parts":[{"type":"image","mime":"image/png","data":"AP8="}]}}`,
		`{"v":1,"id":"e1","kind":"input","time":"2025-01-01T00:00:00Z","input":{"message_id":"m","parts":[{"type":"text","text":"\ud800"}]}}`,
		`{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"},"step":{"response_id":"y"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			_ = err.Error()
			return
		}
		if err := Validate(x); err != nil {
			t.Fatalf("Decode accepted an event Validate refuses: %v", err)
		}
		b, err := Encode(x)
		if err != nil {
			t.Fatalf("Encode(Decode(data)): %v\ndata %q", err, data)
		}
		y, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(x)): %v\nencoded %s", err, b)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("Decode(Encode(x)) != x\ndata    %q\nencoded %s\nx %s\ny %s", data, b, dump(x), dump(y))
		}
	})
}

// dump shows an event with its body and time zone, which %#v of the event
// hides behind pointers.
func dump(e Event) string {
	body := any(nil)
	if v := bodyOf(e); v.IsValid() {
		body = v.Interface()
	}
	return fmt.Sprintf("{ID:%q Kind:%q Time:%s (%q) RunID:%q %s:%#v}", e.ID, e.Kind,
		e.Time.Format("2006-01-02T15:04:05.999999999Z07:00"), e.Time.Location(), e.RunID, bodyField[e.Kind], body)
}
