package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// FuzzDecode checks the decoder at the trust boundary: it never panics,
// every error is a *DecodeError, whatever it accepts re-encodes (the fast
// encoder writing what encoding/json writes) and decodes to a deeply equal
// event, DecodeOwned decodes alike, and Upgrade agrees with it: it refuses
// what Decode refuses and gives, idempotently, the canonical encoding of
// what Decode reads.
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
		// The fast decoder reads what the strict one would, or gives up.
		if w, ok := fastDecode(data, false); ok {
			var strict wireEvent
			if err := strictWire(data, &strict); err != nil {
				t.Fatalf("the fast decoder read what the strict one refuses (%v):\n%q", err, data)
			}
			if !reflect.DeepEqual(w, strict) {
				t.Fatalf("the fast and strict decoders differ:\nfast   %+v\nstrict %+v\ndata %q", w, strict, data)
			}
		}
		x, err := Decode(data)
		up, uerr := Upgrade(data)
		// DecodeOwned decodes alike, sharing its buffer.
		if owned, oerr := DecodeOwned(bytes.Clone(data)); (err == nil) != (oerr == nil) || (err == nil && !reflect.DeepEqual(owned, x)) {
			t.Fatalf("DecodeOwned = %v, %v; Decode = %v, %v", dump(owned), oerr, dump(x), err)
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			_ = err.Error()
			// With no step from an older version, Upgrade reads only
			// what Decode reads.
			if uerr == nil {
				t.Fatalf("Upgrade accepted what Decode refuses (%v):\n%q", err, data)
			}
			return
		}
		if err := Validate(x); err != nil {
			t.Fatalf("Decode accepted an event Validate refuses: %v", err)
		}
		b, err := Encode(x)
		if err != nil {
			t.Fatalf("Encode(Decode(data)): %v\ndata %q", err, data)
		}
		sameEncoding(t, "the decoded event", x)
		y, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(x)): %v\nencoded %s", err, b)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("Decode(Encode(x)) != x\ndata    %q\nencoded %s\nx %s\ny %s", data, b, dump(x), dump(y))
		}
		// Upgrade gives the canonical form, and is idempotent.
		if uerr != nil || !bytes.Equal(up, b) {
			t.Fatalf("Upgrade = %s, %v; want %s", up, uerr, b)
		}
		if again, err := Upgrade(up); err != nil || !bytes.Equal(again, up) {
			t.Fatalf("Upgrade of its own result = %s, %v", again, err)
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

// strictWire decodes data as the strict decoder does, before normalizing.
func strictWire(data []byte, w *wireEvent) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(w); err != nil {
		return err
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return errors.New("trailing data")
	}
	return nil
}

// TestFastDecodeReadsEveryField: the fast decoder reads every field of
// every kind as the strict one does (fullEvents sets them all), so that a
// field added to the events and not to the fast decoder fails here rather
// than slowing Load down unnoticed.
func TestFastDecodeReadsEveryField(t *testing.T) {
	for _, e := range fullEvents() {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := fastDecode(b, false)
		if !ok {
			t.Errorf("%s (%s): the fast decoder gave up on the canonical form:\n%s", e.ID, e.Kind, b)
			continue
		}
		var strict wireEvent
		if err := strictWire(b, &strict); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(w, strict) {
			t.Errorf("%s (%s): fast %+v, strict %+v", e.ID, e.Kind, w, strict)
		}
	}
}
