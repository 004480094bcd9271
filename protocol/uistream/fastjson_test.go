package uistream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// goldenChunks returns the chunks of the golden streams in testdata.
func goldenChunks(t testing.TB) []Chunk {
	files, err := filepath.Glob(filepath.Join("testdata", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden streams: %v", err)
	}
	var out []Chunk
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
			if !ok || string(data) == "[DONE]" {
				continue
			}
			var ch Chunk
			if err := json.Unmarshal(data, &ch); err != nil {
				t.Fatalf("%s: %v: %s", f, err, data)
			}
			out = append(out, ch)
		}
	}
	return out
}

func chunkVariants() []Chunk {
	yes, no := true, false
	s := func(v string) *string { return &v }
	return []Chunk{
		{Type: "text-delta", ID: "text-r1", Delta: s("quotes \" \\ \n\r\t\b\f \x01 \x7f <b> & é 中 😀 \u2028\u2029 \xff bad")},
		{Type: "text-delta", ID: "t", Delta: s("")},
		{Type: "start", MessageID: "m", MessageMetadata: &Metadata{SessionID: "s", RunID: "r"}},
		{Type: "finish", FinishReason: "stop", MessageMetadata: &Metadata{SessionID: "s", RunID: "r", TraceID: "0af7651916cd43dd8448eb211c80319c"}},
		{Type: "tool-approval-request", ToolCallID: "c", ApprovalID: "a", ApprovalDescriptor: &Descriptor{Summary: "pay <100>", ExpiresAt: "2026-01-01T00:00:00Z"}},
		{Type: "tool-approval-request", ApprovalDescriptor: &Descriptor{ExpiresAt: "x"}},
		{Type: "tool-approval-request", ApprovalDescriptor: &Descriptor{}},
		{Type: "tool-approval-response", ApprovalID: "a", Approved: &yes, Reason: "ok"},
		{Type: "tool-approval-response", ApprovalID: "a", Approved: &no},
		{Type: "tool-output-error", ToolCallID: "c", ErrorText: s("boom")},
		{Type: "error", ErrorText: s("")},
		{Type: "tool-input-available", ToolCallID: "c", ToolName: "get", Input: json.RawMessage(`{"a": "<x>"}`)},
		{Type: "data-approval", ID: "a", Data: RunApproval{ApprovalID: "a", Kind: "budget", State: "pending"}},
		{},
	}
}

// TestAppendChunkMatchesMarshal: AppendChunk writes json.Marshal's bytes
// for every chunk of the golden streams and the variants.
func TestAppendChunkMatchesMarshal(t *testing.T) {
	for _, ch := range append(goldenChunks(t), chunkVariants()...) {
		checkAppendChunk(t, ch)
	}
}

func checkAppendChunk(t testing.TB, ch Chunk) {
	t.Helper()
	want, werr := json.Marshal(ch)
	got, err := AppendChunk([]byte("x"), ch)
	if (err != nil) != (werr != nil) || (werr == nil && !bytes.Equal(got[1:], want)) {
		t.Errorf("%+v:\nAppendChunk  %s (%v)\njson.Marshal %s (%v)", ch, got[1:], err, want, werr)
	}
}

// FuzzAppendChunk: for any strings in a chunk's fields, AppendChunk writes
// what json.Marshal does.
func FuzzAppendChunk(f *testing.F) {
	f.Add("text-delta", "m", "text-r1", "Hello <world> & \u2028", "c", "get", "a", "why", "sum", "2026", "s", "r", "", true, 3)
	f.Add("", "", "", "\xff\x00\"\\", "", "", "", "", "", "", "", "", "t", false, 255)
	f.Fuzz(func(t *testing.T, typ, mid, id, delta, call, tool, appr, reason, sum, exp, sess, run, trace string, approved bool, mask int) {
		ch := Chunk{Type: typ, MessageID: mid, ID: id, ToolCallID: call, ToolName: tool, ApprovalID: appr, Reason: reason, FinishReason: reason}
		if mask&1 != 0 {
			ch.Delta = &delta
		}
		if mask&2 != 0 {
			ch.ErrorText = &delta
		}
		if mask&4 != 0 {
			ch.Approved = &approved
		}
		if mask&8 != 0 {
			ch.ApprovalDescriptor = &Descriptor{Summary: sum, ExpiresAt: exp}
		}
		if mask&16 != 0 {
			ch.MessageMetadata = &Metadata{SessionID: sess, RunID: run, TraceID: trace}
		}
		checkAppendChunk(t, ch)
	})
}

func BenchmarkAppendChunk(b *testing.B) {
	d := "a few words"
	ch := Chunk{Type: "text-delta", ID: "text-01JX8ZQ7W4T3M2K9P6R5S0V1YB", Delta: &d}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = AppendChunk(buf[:0], ch)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(ch)
		}
	})
}
