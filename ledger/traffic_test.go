package ledger

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// trafficEvent is a tool result carrying t.
func trafficEvent(t *ToolTraffic) Event {
	return Event{ID: "ev_tr", Kind: KindToolResult, RunID: "run_1", Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		ToolResult: &ToolResult{CallID: "call_1", Name: "publish_post", Output: "ok", Source: "sha256:ab", Fuel: 7, Traffic: t}}
}

// TestTrafficEveryField: every field of every entry of a traffic record,
// set, left out and (lists) empty, is written by the fast encoder as
// encoding/json writes it, and decodes back to the same record on the
// fast path and the strict one alike. (TestFastEncodeEveryField does not
// reach into the entries of a list.)
func TestTrafficEveryField(t *testing.T) {
	check := func(what string, tr *ToolTraffic) {
		t.Helper()
		e := trafficEvent(tr)
		sameEncoding(t, what, e)
		b, err := Encode(e)
		if err != nil {
			t.Errorf("%s: Encode: %v", what, err)
			return
		}
		got, err := Decode(b)
		if err != nil {
			t.Errorf("%s: Decode: %v\n%s", what, err, b)
			return
		}
		strict, err := decodeStrict(b)
		if err != nil {
			t.Errorf("%s: the strict decoder: %v", what, err)
			return
		}
		if !reflect.DeepEqual(got, strict) {
			t.Errorf("%s: the fast and strict decoders differ:\nfast   %#v\nstrict %#v", what, got.ToolResult.Traffic, strict.ToolResult.Traffic)
		}
		if again, err := Encode(got); err != nil || !bytes.Equal(again, b) {
			t.Errorf("%s: re-encoding differs (%v):\n%s\n%s", what, err, b, again)
		}
		if _, ok := fastDecode(b, false); !ok {
			t.Errorf("%s: the fast decoder gave up on the canonical form:\n%s", what, b)
		}
	}
	check("full", fullTraffic())
	check("empty", &ToolTraffic{})
	for _, list := range []string{"HTTP", "KV"} {
		n := reflect.ValueOf(fullTraffic()).Elem().FieldByName(list).Len()
		for i := range n {
			elem := reflect.ValueOf(fullTraffic()).Elem().FieldByName(list).Index(i)
			for f := range elem.NumField() {
				for _, empty := range []bool{false, true} {
					tr := fullTraffic()
					field := reflect.ValueOf(tr).Elem().FieldByName(list).Index(i).Field(f)
					if empty {
						if field.Kind() != reflect.Slice {
							continue
						}
						field.Set(reflect.MakeSlice(field.Type(), 0, 0))
					} else {
						field.SetZero()
					}
					name := elem.Type().Field(f).Name
					if !empty && (name == "Method" || name == "Op") {
						continue // required: Validate refuses it (TestTrafficValidate)
					}
					e := trafficEvent(tr)
					if err := Validate(e); err != nil {
						continue // e.g. a key both as text and as base64 once the other is gone
					}
					check(list+" "+name+map[bool]string{true: " empty", false: " left out"}[empty], tr)
				}
			}
		}
	}
}

// TestTrafficOptional: a tool result without traffic is written without
// the field, byte for byte as before it existed, and one recorded empty
// keeps an empty record (a plugin's call that did nothing through the
// host's functions).
func TestTrafficOptional(t *testing.T) {
	e := trafficEvent(nil)
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"id":"ev_tr","kind":"tool-result","time":"2025-01-02T03:04:05.000000006Z","run_id":"run_1","tool_result":{"call_id":"call_1","name":"publish_post","output":"ok","source":"sha256:ab","fuel":7}}`
	if string(b) != want {
		t.Errorf("without traffic:\ngot  %s\nwant %s", b, want)
	}
	b, err = Encode(trafficEvent(&ToolTraffic{}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, []byte(`"fuel":7,"traffic":{}}}`)) {
		t.Errorf("empty traffic: %s", b)
	}
	got, err := Decode(b)
	if err != nil || got.ToolResult.Traffic == nil || !got.ToolResult.Traffic.Empty() {
		t.Errorf("Decode(empty traffic) = %+v, %v", got.ToolResult, err)
	}
}

// TestTrafficValidate: a record that breaks the schema is refused,
// naming the field.
func TestTrafficValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*ToolTraffic)
		field string
	}{
		{"no method", func(tr *ToolTraffic) { tr.HTTP[0].Method = "" }, "tool_result.traffic.http[0].method"},
		{"unknown op", func(tr *ToolTraffic) { tr.KV[1].Op = "put" }, "tool_result.traffic.kv[1].op"},
		{"negative bytes", func(tr *ToolTraffic) { tr.HTTP[1].ResponseBytes = -1 }, "tool_result.traffic.http[1]"},
		{"two bodies", func(tr *ToolTraffic) { tr.HTTP[1].ResponseBody = "x" }, "tool_result.traffic.http[1].response_body"},
		{"two keys", func(tr *ToolTraffic) { tr.KV[1].Key = "x" }, "tool_result.traffic.kv[1].key"},
		{"negative dropped", func(tr *ToolTraffic) { tr.Dropped = -1 }, "tool_result.traffic.dropped"},
		{"url not UTF-8", func(tr *ToolTraffic) { tr.HTTP[1].URL = "https://x/\xff" }, "tool_result.traffic.http[1].url"},
		{"header not UTF-8", func(tr *ToolTraffic) { tr.HTTP[0].ResponseHeaders[1] = "x: \xff" }, "tool_result.traffic.http[0].response_headers[1]"},
		{"key not UTF-8", func(tr *ToolTraffic) { tr.KV[0].Key = "\xff" }, "tool_result.traffic.kv[0].key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := fullTraffic()
			tc.edit(tr)
			_, err := Encode(trafficEvent(tr))
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalid) || de.Field != tc.field {
				t.Fatalf("Encode = %v, want ErrInvalid at %s", err, tc.field)
			}
		})
	}
}

func TestTrafficReplayable(t *testing.T) {
	var none *ToolTraffic
	if ok, why := none.Replayable(); ok || !strings.Contains(why, "no traffic was recorded") {
		t.Errorf("nil: %v, %q", ok, why)
	}
	whole := &ToolTraffic{HTTP: []HTTPExchange{{Method: "GET", URL: "https://a/"}}, KV: []KVAccess{{Op: KVGet, Key: "k"}}}
	if ok, why := whole.Replayable(); !ok {
		t.Errorf("whole: not replayable: %s", why)
	}
	for name, tc := range map[string]struct {
		tr   *ToolTraffic
		want string
	}{
		"truncated": {&ToolTraffic{Truncated: true, Dropped: 3}, "3 not recorded"},
		"body":      {&ToolTraffic{HTTP: []HTTPExchange{{Method: "GET", URL: "https://a/", BodyOmitted: true}}}, "response bodies not recorded in full (that of GET https://a/)"},
		"value":     {&ToolTraffic{KV: []KVAccess{{Op: KVGet, Key: "k", ValueOmitted: true}}}, `values read not recorded in full (that of key "k")`},
	} {
		if ok, why := tc.tr.Replayable(); ok || !strings.Contains(why, tc.want) {
			t.Errorf("%s: %v, %q; want %q", name, ok, why, tc.want)
		}
	}
	if got := fullTraffic().Summary(); got != "2 HTTP requests, 2 KV accesses (1 written), 3 more not recorded" {
		t.Errorf("Summary = %q", got)
	}
	if got := (&ToolTraffic{}).Summary(); got != "" {
		t.Errorf("Summary of none = %q", got)
	}
}

// TestWireTranscriptTraffic: the transcript's tool call carries the
// traffic; the wire transcript drops its bodies and values (not their
// digests), and leaves the transcript it copies as it was.
func TestWireTranscriptTraffic(t *testing.T) {
	events := toolScenario()
	var found bool
	for i := range events {
		if r := events[i].ToolResult; r != nil && !found {
			r.Traffic, found = fullTraffic(), true
		}
	}
	if !found {
		t.Fatal("no tool result in the scenario")
	}
	tr := ProjectSession("s", events)
	var call *ItemToolCall
	for i := range tr.Items {
		for j := range tr.Items[i].ToolCalls {
			if tr.Items[i].ToolCalls[j].Traffic != nil {
				call = &tr.Items[i].ToolCalls[j]
			}
		}
	}
	if call == nil {
		t.Fatal("no tool call carries the traffic")
	}
	if !reflect.DeepEqual(call.Traffic, fullTraffic()) {
		t.Errorf("the transcript's traffic differs from the ledger's")
	}
	wire := WireTranscript(tr)
	var wc *ItemToolCall
	for i := range wire.Items {
		for j := range wire.Items[i].ToolCalls {
			if wire.Items[i].ToolCalls[j].ID == call.ID {
				wc = &wire.Items[i].ToolCalls[j]
			}
		}
	}
	x := wc.Traffic.HTTP[0]
	if x.ResponseBody != "" || wc.Traffic.HTTP[1].ResponseBodyBase64 != nil || wc.Traffic.KV[0].Value != "" || wc.Traffic.KV[1].ValueBase64 != nil {
		t.Errorf("the wire transcript keeps bodies: %+v", wc.Traffic)
	}
	if x.ResponseDigest != "sha256:3c4d" || x.ResponseBytes != 27 || x.URL != fullTraffic().HTTP[0].URL {
		t.Errorf("the wire transcript lost the exchange: %+v", x)
	}
	if call.Traffic.HTTP[0].ResponseBody == "" {
		t.Errorf("WireTranscript changed the transcript it copies")
	}
}
