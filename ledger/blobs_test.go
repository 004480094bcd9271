package ledger

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func digestOf(c string) string { return "sha256:" + strings.Repeat(c, 64) }

// TestBlobRefs: every digest the events refer to, in parts and tool
// outputs, sorted and each once; nil for events that refer to none.
func TestBlobRefs(t *testing.T) {
	tm := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	events := []Event{
		{ID: "1", Kind: KindInput, Time: tm, Input: &Input{MessageID: "m1", Parts: []Part{
			TextPart("two images"),
			{Type: PartImage, MIME: "image/png", Blob: digestOf("c"), Size: 10},
			{Type: PartImage, MIME: "image/png", Blob: digestOf("a"), Size: 10},
			{Type: PartImage, MIME: "image/png", Data: []byte("inline")},
		}}},
		{ID: "2", Kind: KindToolResult, RunID: "r", Time: tm, ToolResult: &ToolResult{CallID: "c", Name: "x", Output: "pre", OutputBlob: digestOf("b"), OutputSize: 9}},
		{ID: "3", Kind: KindToolResult, RunID: "r", Time: tm, ToolResult: &ToolResult{CallID: "c", Name: "x", Output: "small"}},
		{ID: "4", Kind: KindInput, Time: tm, Input: &Input{MessageID: "m2", Parts: []Part{{Type: PartFile, MIME: "application/pdf", Blob: digestOf("c"), Size: 10}}}},
	}
	if got, want := BlobRefs(events), []string{digestOf("a"), digestOf("b"), digestOf("c")}; !reflect.DeepEqual(got, want) {
		t.Errorf("BlobRefs = %q, want %q", got, want)
	}
	if got := BlobRefs(events[2:3]); got != nil {
		t.Errorf("BlobRefs of events without blobs = %q, want nil", got)
	}
	if got := events[0].BlobRefs(); !reflect.DeepEqual(got, []string{digestOf("c"), digestOf("a")}) {
		t.Errorf("Event.BlobRefs = %q", got)
	}
	for _, e := range events {
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("Encode %s: %v", e.ID, err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode %s: %v", e.ID, err)
		}
		if !reflect.DeepEqual(d, e) {
			t.Errorf("event %s does not round-trip: %s", e.ID, b)
		}
	}
}

// TestBlobValidation: a reference must be a digest, without inline bytes,
// with a media type; a size needs a blob.
func TestBlobValidation(t *testing.T) {
	tm := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	input := func(p Part) Event {
		return Event{ID: "i", Kind: KindInput, Time: tm, Input: &Input{MessageID: "m", Parts: []Part{p}}}
	}
	result := func(r ToolResult) Event {
		r.CallID, r.Name = "c", "x"
		return Event{ID: "t", Kind: KindToolResult, RunID: "r", Time: tm, ToolResult: &r}
	}
	for name, e := range map[string]Event{
		"bad digest":        input(Part{Type: PartImage, MIME: "image/png", Blob: "sha256:ABC", Size: 1}),
		"data and blob":     input(Part{Type: PartImage, MIME: "image/png", Blob: digestOf("a"), Data: []byte("x"), Size: 1}),
		"blob without mime": input(Part{Type: PartImage, Blob: digestOf("a"), Size: 1}),
		"size without blob": input(Part{Type: PartImage, MIME: "image/png", Data: []byte("x"), Size: 1}),
		"negative size":     input(Part{Type: PartFile, MIME: "a/b", Blob: digestOf("a"), Size: -1}),
		"text with a blob":  input(Part{Type: PartText, Text: "x", Blob: digestOf("a")}),
		"bad output blob":   result(ToolResult{OutputBlob: "md5:00", OutputSize: 3}),
		"output size alone": result(ToolResult{Output: "x", OutputSize: 3}),
	} {
		if err := Validate(e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	for name, e := range map[string]Event{
		"image by reference":  input(Part{Type: PartImage, MIME: "image/png", Blob: digestOf("a"), Size: 7}),
		"output by reference": result(ToolResult{Output: "preview", OutputBlob: digestOf("b"), OutputSize: 70000}),
	} {
		if err := Validate(e); err != nil {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
