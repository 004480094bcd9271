package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// sameEncoding fails t unless the fast encoder writes for e exactly what
// encoding/json writes, or gives up exactly where encoding/json fails. An
// event with raw JSON that is not valid, which the fast encoder is never
// given, Encode must refuse.
func sameEncoding(t *testing.T, what string, e Event) {
	t.Helper()
	want, werr := slowEncode(e)
	if !rawValid(e) {
		if b, err := Encode(e); err == nil || werr == nil {
			t.Errorf("%s: raw JSON that is not valid: Encode = %s, %v; encoding/json: %v", what, b, err, werr)
		}
		return
	}
	got, ok, badText := fastEncode(nil, &e)
	// Encode leaves the texts' UTF-8 to the fast encoder: it must see
	// every text the schema checks.
	if field := invalidText(&e); field != "" && ok && !badText {
		t.Errorf("%s: %s is not UTF-8, and the fast encoder did not tell", what, field)
	}
	switch {
	case werr != nil && ok:
		t.Errorf("%s: the fast encoder wrote what encoding/json refuses (%v):\n%s", what, werr, got)
	case werr == nil && !ok:
		t.Errorf("%s: the fast encoder gave up on what encoding/json writes:\n%s", what, want)
	case ok && !bytes.Equal(got, want):
		t.Errorf("%s: the encoders differ:\nfast %s\njson %s", what, got, want)
	}
}

// rawValid tells whether every raw JSON field of e is absent or valid, as
// Validate checks before Encode calls the fast encoder.
func rawValid(e Event) bool {
	if e.RunStart != nil && e.RunStart.Task != nil {
		if m := e.RunStart.Task.Schema; m != nil && !json.Valid(m) { // never left out
			return false
		}
	}
	var raws []json.RawMessage // left out when empty
	if e.Step != nil {
		raws = append(raws, e.Step.Raw)
	}
	if e.ApprovalRequest != nil {
		raws = append(raws, e.ApprovalRequest.Input)
	}
	if e.RunEnd != nil {
		raws = append(raws, e.RunEnd.Deliverable)
	}
	for _, m := range raws {
		if len(m) > 0 && !json.Valid(m) {
			return false
		}
	}
	return true
}

// TestFastEncodeEveryField: for every field of every kind, set (as
// fullEvents sets them all) and left empty, the fast encoder writes what
// encoding/json writes. A field added to an event and not to the fast
// encoder fails here.
func TestFastEncodeEveryField(t *testing.T) {
	for i, e := range fullEvents() {
		sameEncoding(t, e.ID, e)
		for _, path := range fieldPaths(reflect.ValueOf(&e).Elem()) {
			for _, empty := range []bool{false, true} {
				e := fullEvents()[i]
				f := fieldAt(reflect.ValueOf(&e).Elem(), path)
				if empty {
					if f.Kind() != reflect.Slice {
						continue
					}
					f.Set(reflect.MakeSlice(f.Type(), 0, 0)) // empty, not nil
				} else {
					f.SetZero()
				}
				sameEncoding(t, e.ID+" without "+pathString(path), e)
			}
		}
	}
	for _, sc := range [][]Event{chatScenario(), toolScenario(), cancelledScenario(), compactionScenario()} {
		for _, e := range sc {
			sameEncoding(t, e.ID, e)
		}
	}
}

// TestEncodeChecksEveryText: Encode leaves the texts' UTF-8 to the fast
// encoder; for every text field of every kind, made invalid UTF-8, Encode
// refuses where Validate does, naming the same field (the reason may be
// another check of that field's, made first).
func TestEncodeChecksEveryText(t *testing.T) {
	for i, e := range fullEvents() {
		for _, path := range fieldPaths(reflect.ValueOf(&e).Elem()) {
			e := fullEvents()[i]
			f := fieldAt(reflect.ValueOf(&e).Elem(), path)
			switch {
			case f.Kind() == reflect.String:
				f.SetString("bad \xff text")
			case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
				f.Set(reflect.ValueOf([]string{"ok", "bad \xff"}).Convert(f.Type()))
			default:
				continue
			}
			verr := Validate(e)
			_, err := Encode(e)
			var de, vde *DecodeError
			if (verr == nil) != (err == nil) || (err != nil && (!errors.As(err, &de) || !errors.As(verr, &vde) || de.Field != vde.Field)) {
				t.Errorf("%s with %s not UTF-8: Encode = %v, Validate = %v", e.ID, pathString(path), err, verr)
			}
		}
	}
}

// fieldPaths lists the index paths of v's fields, through pointers that
// are set and nested structs (time.Time is a value of its own).
func fieldPaths(v reflect.Value) [][]int {
	var paths [][]int
	var walk func(v reflect.Value, prefix []int)
	walk = func(v reflect.Value, prefix []int) {
		for i := range v.NumField() {
			path := append(append([]int(nil), prefix...), i)
			paths = append(paths, path)
			f := v.Field(i)
			if f.Kind() == reflect.Pointer && !f.IsNil() {
				f = f.Elem()
			}
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
				walk(f, path)
			}
		}
	}
	walk(v, nil)
	return paths
}

// fieldAt follows an index path of fieldPaths.
func fieldAt(v reflect.Value, path []int) reflect.Value {
	for _, i := range path {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v
}

func pathString(path []int) string {
	v := reflect.TypeFor[Event]()
	s := ""
	for _, i := range path {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		f := v.Field(i)
		s += "." + f.Name
		v = f.Type
	}
	return s
}

// TestFastEncodeEdges: the values where encoding/json's forms have rules of
// their own — escapes, number forms, times in other zones and out of
// range, raw JSON to compact or refuse — are written alike, and the fast
// encoder gives up exactly where encoding/json fails.
func TestFastEncodeEdges(t *testing.T) {
	base := func() Event {
		return Event{ID: "e", Kind: KindStep, RunID: "r", Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
			Step: &Step{ResponseID: "resp"}}
	}
	for _, s := range []string{"", "plain", "\"quoted\" \\ back", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "<&>",
		"\u2028\u2029", "é ☃ 😀", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "\uFFFD"} {
		e := base()
		e.Step.Text, e.ID, e.Step.ToolCalls = s, "e"+s, []ToolCall{{ID: s, Name: s, Arguments: s}}
		sameEncoding(t, "string "+s, e)
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 1e-7, 9.99e-7, 1e20, 1e21, 123456789.123,
		5e-324, math.MaxFloat64, -1e-9, math.NaN(), math.Inf(1), math.Inf(-1)} {
		e := base()
		e.Step.Usage.Cost, e.Step.Usage.UpstreamCost = f, -f
		sameEncoding(t, "float", e)
	}
	for _, tm := range []time.Time{
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600)),
		time.Date(2025, 1, 2, 3, 4, 5, 120, time.FixedZone("", -(5*3600+30*60))),
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3661)),
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", 24*3600)),
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", -99*3600)),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		{},
	} {
		e := base()
		e.Time = tm
		sameEncoding(t, "time "+tm.String(), e)
	}
	for _, raw := range []string{`{"a": [1, 2 ,3]}`, ` "x" `, `null`, `<&>`, `{"a":`, `{"a":"<&>\u2028"}`, "\"\xff\"", `1 2`,
		"\t{ \"a b\" :\r\n[ \"c\\\" d\\\\\" , true ,null,-1.5e3 ] }\n", `"\\"`, `""`, "\"\u2028 \u2029\""} {
		e := base()
		e.Step.Raw = json.RawMessage(raw)
		sameEncoding(t, "raw "+raw, e)
	}
	e := base()
	e.Kind, e.Step, e.RunStart = KindRunStart, nil, &RunStart{ResponseID: "r", Task: &TaskRun{}}
	sameEncoding(t, "task without a schema", e)
	e.RunStart.Task.Schema = json.RawMessage{}
	sameEncoding(t, "task with an empty schema", e)
}

// TestEncodeFallsBack: what the fast encoder gives up on, Encode still
// refuses as encoding/json does, naming the event.
func TestEncodeFallsBack(t *testing.T) {
	e := Event{ID: "e1", Kind: KindStep, RunID: "r", Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Step: &Step{ResponseID: "resp", Usage: Usage{Cost: math.NaN()}}}
	if b, err := Encode(e); err == nil {
		t.Fatalf("Encode wrote a NaN cost: %s", b)
	} else if de := (*DecodeError)(nil); !errors.As(err, &de) || de.EventID != "e1" {
		t.Fatalf("Encode: %v, want a *DecodeError naming e1", err)
	}
}

// FuzzEncode checks the fast encoder against encoding/json on events built
// from arbitrary strings, numbers, times and raw JSON.
func FuzzEncode(f *testing.F) {
	f.Add("hello", "<&>\u2028", 0.0123, int64(1540), []byte(`{"a": 1}`), int64(1735787045), int64(123456789), 0)
	f.Add("\xff\x00\"\\", "\t", math.Inf(1), int64(-1), []byte(`{`), int64(-62135596800), int64(0), 3661)
	f.Add("", "", 1e-7, int64(0), []byte(nil), int64(253402300800), int64(1), -86400)
	f.Fuzz(func(t *testing.T, s, s2 string, fl float64, n int64, raw []byte, sec, nsec int64, offset int) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("", offset))
		events := []Event{
			{ID: s, Kind: KindStep, RunID: s2, Time: tm, Step: &Step{ResponseID: s2, NextResponseID: s, Index: int(n),
				Inputs: []string{s, s2}, Text: s, Reasoning: s2, ToolCalls: []ToolCall{{ID: s, Name: s2, Arguments: s}},
				Usage: Usage{PromptTokens: n, CompletionTokens: -n, TotalTokens: n, CachedTokens: n, Cost: fl,
					IsBYOK: new(bool), UpstreamCost: fl * 3}, Raw: raw}},
			{ID: s, Kind: KindInput, Time: tm, Input: &Input{MessageID: s2, Parts: []Part{
				{Type: PartType(s), Text: s2, Data: raw, MIME: s, URL: s2, Name: s, Blob: s2, Size: n}}}},
			{ID: s, Kind: KindRunEnd, RunID: s, Time: tm, RunEnd: &RunEnd{Status: RunStatus(s2), Reason: s,
				Inputs: []string{s2}, Deliverable: raw}},
			{ID: s, Kind: KindApprovalRequest, RunID: s, Time: tm, ApprovalRequest: &ApprovalRequest{ApprovalID: s,
				CallID: s2, Name: s, Input: raw, Summary: s2, ExpiresAt: tm}},
			{ID: s, Kind: KindRunStart, RunID: s, Time: tm, RunStart: &RunStart{Inputs: []string{s}, ResponseID: s2,
				MaxSteps: int(n), Task: &TaskRun{Description: s2, Schema: raw, MaxPokes: int(n)}}},
			{ID: s, Kind: KindToolResult, RunID: s, Time: tm, ToolResult: &ToolResult{CallID: s2, Name: s, Output: s2, OutputBlob: s, OutputSize: -n,
				Traffic: &ToolTraffic{HTTP: []HTTPExchange{{Seq: int(n), Method: s, URL: s2, RequestHeaders: []string{s, s2},
					RequestBytes: n, Status: int(-n), ResponseHeaders: []string{s2}, ResponseBody: s, ResponseBodyBase64: raw,
					Error: s2, DurationMS: n}}, KV: []KVAccess{{Seq: int(n), Op: s2, Key: s, KeyBase64: raw, ValueBytes: -n,
					Value: s2, ValueBase64: raw, Error: s}}, Dropped: int(n)}}},
		}
		for _, e := range events {
			sameEncoding(t, string(e.Kind), e)
		}
	})
}

// TestAppendStringEveryByte: every byte value, at every place of a string
// long enough for the eight-byte scan, alone and beside a multi-byte
// rune cut at the scan's edge, is written as encoding/json writes it.
func TestAppendStringEveryByte(t *testing.T) {
	for c := range 256 {
		for at := range 17 {
			for _, tail := range []string{"", "é", "\u2028", "\xe2\x80"} {
				s := []byte(strings.Repeat("a", 17) + tail)
				s[at] = byte(c)
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(string(s)); err != nil {
					t.Fatal(err)
				}
				want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
				got, bad := appendString(nil, string(s))
				if !bytes.Equal(got, want) {
					t.Fatalf("byte %#x at %d, tail %q: got %s, want %s", c, at, tail, got, want)
				}
				if bad == utf8.ValidString(string(s)) {
					t.Fatalf("byte %#x at %d, tail %q: appendString says bad=%v", c, at, tail, bad)
				}
			}
		}
	}
}

// TestEncodedSizeHint: the size Encode allocates is a little over the
// line's length, so that a store keeping lines keeps little more than
// their bytes, and short for few events, whose line then grows once.
func TestEncodedSizeHint(t *testing.T) {
	events := append(benchSession(3000), fullEvents()...)
	for _, sc := range [][]Event{chatScenario(), toolScenario(), cancelledScenario(), compactionScenario(), reusedCallIDsScenario()} {
		events = append(events, sc...)
	}
	var lines, hints, short int
	for _, e := range events {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		h := encodedSizeHint(&e)
		lines, hints = lines+len(b), hints+h
		if h < len(b) {
			short++
		}
	}
	if r := float64(hints) / float64(lines); r < 1 || r > 1.1 {
		t.Errorf("the hints add up to %.3f× the lines' length, want 1 to 1.1", r)
	}
	if short > len(events)/100 {
		t.Errorf("the hint is short for %d of %d events, want at most 1%%", short, len(events))
	}
}
