package host_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

// noise returns n pseudo-random bytes (not text), the same for a seed.
func noise(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// bigTool answers every call with out.
func bigTool(out string) host.Tool {
	return host.NewTool(host.ToolSpec{Name: "dump", Description: "Dump a large file.",
		InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: out}, nil
		})
}

// blobScript is the model's side of blobConversation: a plain answer to
// the two messages with the image, then a call of the dump tool and an
// answer after its output.
func blobScript() []fakemodel.Reply {
	return []fakemodel.Reply{
		{Text: "A picture."},
		{Text: "The same picture."},
		{ToolCalls: []fakemodel.ToolCall{{ID: "call_dump", Name: "dump", Arguments: `{}`}}},
		{Text: "A long file."},
	}
}

// blobConversation sends the image twice, then asks for the dump.
func blobConversation(t *testing.T, h *host.Host, image []byte) {
	t.Helper()
	ctx := context.Background()
	sess := h.Session("pics")
	for _, text := range []string{"Look at this.", "And this one?"} {
		res, err := sess.Send(ctx, text, host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Name: "cat.png", Data: image}}})
		if err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("send %q: %+v, %v", text, res, err)
		}
	}
	if res, err := sess.Send(ctx, "Dump the file.", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("send: %+v, %v", res, err)
	}
}

// TestBlobsByReference: with a store that keeps blobs, an image above the
// threshold and a large tool output are kept by reference (the image sent
// twice stored once), and the model gets, byte for byte, the requests it
// gets from a host that keeps everything inline (as does a store without
// Blobs, whose ledger holds the bytes); the transcript, another
// host (no cache) and ResolveBlobs read the bytes back.
func TestBlobsByReference(t *testing.T) {
	image := noise(1, 100<<10)
	output := strings.Repeat("line of a large file\n", 8000) // 168 000 bytes
	agent := host.Agent{Tools: []host.Tool{bigTool(output)}, MaxToolResultBytes: -1}

	store, err := file.Open(t.TempDir(), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	byRef := newHarness(t, fakemodel.Options{Script: blobScript()}, agent, func(o *host.Options) { o.Storage = store })
	inline := newHarness(t, fakemodel.Options{Script: blobScript()}, agent, func(o *host.Options) { o.BlobThreshold = -1 })
	blobConversation(t, byRef.host, image)
	blobConversation(t, inline.host, image)

	// The model saw the same requests, byte for byte.
	got, want := byRef.model.Requests(), inline.model.Requests()
	if len(got) != len(want) || len(got) != 4 {
		t.Fatalf("%d requests by reference, %d inline; want 4 each", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Raw, want[i].Raw) {
			t.Errorf("request %d differs: %d bytes by reference, %d inline", i+1, len(got[i].Raw), len(want[i].Raw))
		}
	}
	if !bytes.Contains(got[1].Raw, []byte(base64.StdEncoding.EncodeToString(image))) {
		t.Error("the second request does not carry the image")
	}
	if !bytes.Contains(got[3].Raw, []byte(strings.Repeat(`line of a large file\n`, 100))) {
		t.Error("the last request does not carry the tool's output")
	}

	// The ledger keeps references; the image is stored once.
	events := byRef.events("pics")
	var refs, inputs int
	for _, e := range events {
		if e.Input != nil && len(e.Input.Parts) == 2 {
			inputs++
			p := e.Input.Parts[1]
			if p.Blob != storage.BlobDigest(image) || len(p.Data) != 0 || p.Size != int64(len(image)) || p.MIME != "image/png" || p.Name != "cat.png" {
				t.Errorf("input part = %s %d bytes inline, size %d, %s %s; want a reference to the image", p.Blob, len(p.Data), p.Size, p.MIME, p.Name)
			}
		}
		if r := e.ToolResult; r != nil {
			refs++
			if r.OutputBlob != storage.BlobDigest([]byte(output)) || r.OutputSize != int64(len(output)) || len(r.Output) > 1024 || !strings.HasPrefix(output, r.Output) {
				t.Errorf("tool result = %s, size %d, output of %d bytes; want a reference and a preview", r.OutputBlob, r.OutputSize, len(r.Output))
			}
		}
	}
	if inputs != 2 || refs != 1 {
		t.Fatalf("%d inputs with the image and %d tool results, want 2 and 1", inputs, refs)
	}
	if want := []string{storage.BlobDigest(image), storage.BlobDigest([]byte(output))}; !equalSets(ledger.BlobRefs(events), want) {
		t.Errorf("BlobRefs = %q, want %q", ledger.BlobRefs(events), want)
	}
	infos, err := store.ListBlobs(context.Background())
	if err != nil || len(infos) != 2 {
		t.Fatalf("the store holds %d blobs (%v), want 2: the image once, the output", len(infos), err)
	}
	if blobs, _ := inline.store.(storage.Blobs).ListBlobs(context.Background()); len(blobs) != 0 {
		t.Errorf("with BlobThreshold -1 the store holds %d blobs", len(blobs))
	}
	// A store without Blobs, at the default threshold: the bytes stay in
	// the events, and the model's requests are the same.
	noStore := newHarness(t, fakemodel.Options{Script: blobScript()}, agent, func(o *host.Options) { o.Storage = noBlobs{memory.New()} })
	blobConversation(t, noStore.host, image)
	if refs := ledger.BlobRefs(noStore.events("pics")); refs != nil {
		t.Errorf("a store without Blobs: the ledger holds references %q", refs)
	}
	if !equalEvents(noStore.events("pics"), inline.events("pics")) {
		t.Error("a store without Blobs: the ledger is not the inline one (but for ids and times)")
	}
	for i, r := range noStore.model.Requests() {
		if !bytes.Equal(r.Raw, want[i].Raw) {
			t.Errorf("a store without Blobs: request %d differs from the inline host's", i+1)
		}
	}

	// What reads the session gets the bytes back: the transcript, a host
	// that put nothing (no cache), ResolveBlobs over the store.
	tr, err := byRef.host.Session("pics").Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Items[0].Parts; len(p) != 2 || !bytes.Equal(p[1].Data, image) || p[1].Blob != "" {
		t.Errorf("the transcript's first item does not hold the image: %+v", tr.Items[0])
	}
	other := newHarness(t, fakemodel.Options{}, agent, func(o *host.Options) { o.Storage = store })
	tr2, err := other.host.Session("pics").Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !equalTranscripts(tr, tr2) {
		t.Error("another host's transcript differs")
	}
	if _, err := other.host.Session("pics").Send(context.Background(), "Anything else?", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	last := other.model.Requests()[0].Raw
	if !bytes.Contains(last, []byte(base64.StdEncoding.EncodeToString(image))) || !bytes.Contains(last, []byte(strings.Repeat(`line of a large file\n`, 100))) {
		t.Error("another host's request lacks the image or the output")
	}
	resolved, err := host.ResolveBlobs(context.Background(), store, events)
	if err != nil {
		t.Fatal(err)
	}
	if refs := ledger.BlobRefs(resolved); refs != nil {
		t.Errorf("ResolveBlobs left references %q", refs)
	}
	if !equalEvents(resolved, inline.events("pics")) {
		t.Error("the resolved ledger is not the inline one (but for ids and times)")
	}
}

// equalSets compares two lists of strings as sets.
func equalSets(a, b []string) bool {
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

func equalTranscripts(a, b ledger.Transcript) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// equalEvents compares the bodies of two ledgers' inputs and tool results.
func equalEvents(a, b []ledger.Event) bool {
	body := func(evs []ledger.Event) []byte {
		var out []any
		for _, e := range evs {
			if e.Input != nil {
				out = append(out, e.Input.Parts)
			}
			if e.ToolResult != nil {
				r := *e.ToolResult
				r.DurationMS = 0
				out = append(out, r)
			}
		}
		j, _ := json.Marshal(out)
		return j
	}
	return bytes.Equal(body(a), body(b))
}

// TestBlobQuota: a message whose parts pass the quota or the largest blob
// allowed fails with a *BlobQuotaError, and nothing is appended or stored;
// one that adds nothing new (its image is stored already) passes. A tool's
// output is never refused for the quota: kept by reference past it, the
// run completes (a result is never lost).
func TestBlobQuota(t *testing.T) {
	store := memory.New()
	output := strings.Repeat("a large tool output ", 600) // 12,000 bytes
	agent := host.Agent{Tools: []host.Tool{bigTool(output)}, MaxToolResultBytes: -1}
	hs := newHarness(t, fakemodel.Options{}, agent, func(o *host.Options) {
		o.Storage, o.BlobThreshold, o.BlobQuota, o.MaxBlobBytes = store, 1000, 10_000, 6000
	})
	ctx := context.Background()
	sess := hs.host.Session("q")
	send := func(parts ...ledger.Part) error {
		_, err := sess.Send(ctx, "see", host.SendOptions{Parts: parts})
		return err
	}
	img := func(seed uint64, n int) ledger.Part {
		return ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: noise(seed, n)}
	}
	if err := send(img(1, 5000)); err != nil {
		t.Fatal(err)
	}
	err := send(img(2, 7000))
	var qe *host.BlobQuotaError
	if !errors.As(err, &qe) || !errors.Is(err, host.ErrBlobQuota) || qe.Limit != "size" || qe.Max != 6000 || qe.Size != 7000 {
		t.Errorf("a part past MaxBlobBytes: %v, want a *BlobQuotaError of size", err)
	}
	err = send(img(3, 3000), img(4, 3000))
	if !errors.As(err, &qe) || qe.Limit != "quota" || qe.Used != 5000 || qe.Size != 6000 || qe.Max != 10_000 ||
		!strings.Contains(err.Error(), "blob quota of 10000 bytes") {
		t.Errorf("parts past BlobQuota: %v, want a *BlobQuotaError of quota, 5000 used, 6000 more", err)
	}
	if err := send(img(1, 5000), img(5, 500)); err != nil {
		t.Errorf("a message whose large part is stored already (and a small one inline): %v", err)
	}
	inputs := 0
	for _, e := range hs.events("q") {
		if e.Input != nil {
			inputs++
		}
	}
	infos, _ := store.ListBlobs(ctx)
	if inputs != 2 || len(infos) != 1 {
		t.Errorf("%d inputs and %d blobs, want 2 and 1: refused messages append and store nothing", inputs, len(infos))
	}

	// 5,000 bytes used of 10,000: an output of 12,000 passes the quota,
	// and is kept all the same.
	hs.model.Enqueue(fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{ID: "call_dump", Name: "dump", Arguments: `{}`}}}, fakemodel.Reply{Text: "A long file."})
	res, err := sess.Send(ctx, "dump it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("a tool output past the quota: %+v %v, want the run completed", res, err)
	}
	var kept bool
	for _, e := range hs.events("q") {
		if r := e.ToolResult; r != nil && r.OutputBlob == storage.BlobDigest([]byte(output)) {
			kept = true
		}
	}
	if b, ok, err := store.GetBlob(ctx, storage.BlobDigest([]byte(output))); !kept || !ok || err != nil || string(b) != output {
		t.Errorf("the output past the quota: referenced %v, stored %v (%v)", kept, ok, err)
	}
}

// TestBlobPartByReference: a part may name a blob the store holds (sent
// again by reference); one naming a blob it does not hold is refused.
func TestBlobPartByReference(t *testing.T) {
	store := memory.New()
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store })
	ctx := context.Background()
	data := noise(9, 70<<10)
	d, err := store.PutBlob(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	sess := hs.host.Session("r")
	if _, err := sess.Send(ctx, "again", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartFile, MIME: "application/pdf", Blob: d}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(hs.model.Requests()[0].Raw, []byte(base64.StdEncoding.EncodeToString(data))) {
		t.Error("the request does not carry the blob's bytes")
	}
	missing := storage.BlobDigest([]byte("never stored"))
	_, err = sess.Send(ctx, "ghost", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartFile, MIME: "application/pdf", Blob: missing}}})
	if !errors.Is(err, host.ErrInvalidInput) || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("a part naming a missing blob: %v, want ErrInvalidInput", err)
	}
	_, err = sess.Send(ctx, "bad", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartFile, MIME: "application/pdf", Blob: "sha256:../../etc"}}})
	if !errors.Is(err, host.ErrInvalidInput) || !strings.Contains(err.Error(), "blob digest") {
		t.Errorf("a part naming no digest: %v, want ErrInvalidInput", err)
	}
}

// TestBlobsConcurrentSends: sessions sending the same image at once store
// it once, and every request carries it.
func TestBlobsConcurrentSends(t *testing.T) {
	store := memory.New()
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store })
	image := noise(3, 80<<10)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := hs.host.Session(fmt.Sprintf("c%d", i)).Send(context.Background(), "look", host.SendOptions{
				Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Data: image}}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	infos, err := store.ListBlobs(context.Background())
	if err != nil || len(infos) != 1 {
		t.Fatalf("8 sessions sent one image: %d blobs (%v), want 1", len(infos), err)
	}
	want := []byte(base64.StdEncoding.EncodeToString(image))
	for i, r := range hs.model.Requests() {
		if !bytes.Contains(r.Raw, want) {
			t.Errorf("request %d does not carry the image", i+1)
		}
	}
}

// TestBlobsAttachSnapshot: the snapshot a viewer attaching to a session
// gets (the console's and the events stream's) carries the bytes of an
// attachment kept by reference.
func TestBlobsAttachSnapshot(t *testing.T) {
	store := memory.New()
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store })
	ctx := context.Background()
	image := noise(4, 90<<10)
	sess := hs.host.Session("att")
	if _, err := sess.Send(ctx, "look", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Data: image}}}); err != nil {
		t.Fatal(err)
	}
	if refs := ledger.BlobRefs(hs.events("att")); len(refs) != 1 {
		t.Fatalf("the ledger refers to %d blobs, want 1", len(refs))
	}
	a, err := sess.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	u, err := a.Next(ctx)
	if err != nil || u.Snapshot == nil {
		t.Fatalf("Next = %+v, %v; want a snapshot", u, err)
	}
	items := u.Snapshot.Transcript.Items
	if len(items) == 0 || len(items[0].Parts) != 2 || !bytes.Equal(items[0].Parts[1].Data, image) {
		t.Error("the snapshot's transcript does not carry the image")
	}
}

// TestBlobsMissing: a blob the storage no longer holds (deleted by hand)
// does not wedge its session: the model is told in words what was there,
// and the transcript keeps the reference.
func TestBlobsMissing(t *testing.T) {
	store := memory.New()
	output := strings.Repeat("a log line\n", 10_000)
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{ID: "call_dump", Name: "dump", Arguments: `{}`}}},
		{Text: "Seen."},
		{Text: "Still here."},
	}}, host.Agent{Tools: []host.Tool{bigTool(output)}, MaxToolResultBytes: -1}, func(o *host.Options) { o.Storage = store })
	ctx := context.Background()
	image := noise(5, 70<<10)
	sess := hs.host.Session("m")
	if _, err := sess.Send(ctx, "look", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Name: "cat.png", Data: image}}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range ledger.BlobRefs(hs.events("m")) {
		if err := store.DeleteBlob(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	res, err := sess.Send(ctx, "again", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("a send after the blobs were deleted: %+v, %v", res, err)
	}
	reqs := hs.model.Requests()
	last := string(reqs[len(reqs)-1].Raw)
	for _, want := range []string{"[image cat.png (image/png, 71680 bytes) was attached here; it is no longer stored]",
		`[the rest of this output, 110000 bytes in all, is no longer stored]`} {
		if !strings.Contains(last, want) {
			t.Errorf("the request does not say %q", want)
		}
	}
	tr, err := sess.Transcript(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Items[0].Parts[1]; p.Blob != storage.BlobDigest(image) || len(p.Data) != 0 {
		t.Errorf("the transcript's part: %s, %d bytes; want the reference kept", p.Blob, len(p.Data))
	}
}

// TestSessionDeleteBlobs: deleting a session removes the blobs only its
// events referred to, and keeps one another session refers to too; with
// KeepBlobs, none.
func TestSessionDeleteBlobs(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	h := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store; o.BlobThreshold = 16 })
	shared, own := noise(7, 4096), noise(8, 2048)
	send := func(session string, images ...[]byte) {
		var parts []ledger.Part
		for _, im := range images {
			parts = append(parts, ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: im})
		}
		if res, err := h.host.Session(session).Send(ctx, "look", host.SendOptions{Parts: parts}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("send to %s: %+v, %v", session, res, err)
		}
	}
	send("a", shared, own)
	send("b", shared)
	send("c", own)
	// KeepBlobs leaves them to the caller.
	if rep, err := h.host.Session("c").Delete(ctx, host.DeleteOptions{KeepBlobs: true}); err != nil || rep.Blobs != 0 {
		t.Fatalf("deleting c, keeping its blobs: %+v, %v", rep, err)
	}
	rep, err := h.host.Session("a").Delete(ctx, host.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blobs != 1 || rep.BlobBytes != int64(len(own)) {
		t.Errorf("report %+v, want the one blob only a referred to (%d bytes)", rep, len(own))
	}
	if _, ok, _ := store.GetBlob(ctx, storage.BlobDigest(own)); ok {
		t.Error("the blob only the deleted session referred to is still there")
	}
	if _, ok, _ := store.GetBlob(ctx, storage.BlobDigest(shared)); !ok {
		t.Error("the blob another session refers to was deleted")
	}
	// b goes too: the shared blob with it.
	if rep, err := h.host.Session("b").Delete(ctx, host.DeleteOptions{}); err != nil || rep.Blobs != 1 {
		t.Errorf("deleting b: %+v, %v", rep, err)
	}
	if infos, _ := store.ListBlobs(ctx); len(infos) != 0 {
		t.Errorf("blobs left: %+v", infos)
	}
}

// TestForkOfDeletedBlob: a fork whose copies refer to a blob that is gone
// (a sweep deleted it once the source's session was deleted, after the
// fork read the source) is refused as of a source that changed, rather
// than made referring to nothing; with the blob there, it is made.
func TestForkOfDeletedBlob(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	h := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store; o.BlobThreshold = 16 })
	image := noise(9, 4096)
	res, err := h.host.Session("src").Send(ctx, "look", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Data: image}}})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("send: %+v, %v", res, err)
	}
	// The sweep's delete, between the fork's read and its write.
	if err := store.DeleteBlob(ctx, storage.BlobDigest(image)); err != nil {
		t.Fatal(err)
	}
	_, err = h.host.Fork(ctx, host.ForkOptions{Source: "src", At: res.ResponseID, SessionID: "f1"})
	if !errors.Is(err, host.ErrSessionChanged) {
		t.Fatalf("a fork of a deleted blob: %v, want ErrSessionChanged", err)
	}
	if evs, _ := store.Load(ctx, "f1"); len(evs) != 0 {
		t.Fatalf("the refused fork wrote %d events", len(evs))
	}
	if _, err := store.PutBlob(ctx, image); err != nil {
		t.Fatal(err)
	}
	r, err := h.host.Fork(ctx, host.ForkOptions{Source: "src", At: res.ResponseID, SessionID: "f2"})
	if err != nil {
		t.Fatalf("a fork with its blob there: %v", err)
	}
	r.Wait(ctx)
}

// flakyBlobs is a store whose blob reads fail while failing is set, as a
// blob store that does not answer.
type flakyBlobs struct {
	*memory.Store
	failing *atomic.Bool
}

func (s flakyBlobs) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	if s.failing.Load() {
		return nil, false, errors.New("the blob store does not answer")
	}
	return s.Store.GetBlob(ctx, digest)
}

// TestBlobsUnreadable: an error reading the blob store (not a blob gone)
// leaves the run that needs the bytes interrupted, its message kept; once
// the store answers, resuming the run answers it, with the bytes.
func TestBlobsUnreadable(t *testing.T) {
	store := memory.New()
	image := noise(6, 70<<10)
	first := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = store })
	ctx := context.Background()
	if _, err := first.host.Session("b").Send(ctx, "look", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Name: "cat.png", Data: image}}}); err != nil {
		t.Fatal(err)
	}
	if refs := ledger.BlobRefs(first.events("b")); len(refs) != 1 {
		t.Fatalf("the image is not kept by reference: %q", refs)
	}

	// Another host (no cache of the bytes), while the blob store fails.
	var failing atomic.Bool
	failing.Store(true)
	other := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = flakyBlobs{store, &failing} })
	sess := other.host.Session("b")
	res, err := sess.Send(ctx, "again", host.SendOptions{})
	if err == nil && res.Status == ledger.RunCompleted {
		t.Fatalf("a run whose bytes cannot be read completed: %+v", res)
	}
	st, err := sess.Status(ctx)
	if err != nil || st.State != host.StateInterrupted {
		t.Fatalf("after the blob store failed: %+v %v, want the run interrupted", st, err)
	}
	if n := other.model.RequestCount(); n != 0 {
		t.Errorf("the model was asked %d times without the image", n)
	}

	failing.Store(false)
	if res, err := sess.Resume(ctx, host.ResumeOptions{}); err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: again" {
		t.Fatalf("resumed once the store answers: %+v %v", res, err)
	}
	if last := other.model.Requests()[other.model.RequestCount()-1].Raw; !bytes.Contains(last, []byte(base64.StdEncoding.EncodeToString(image))) {
		t.Error("the resumed run's request does not carry the image")
	}
}
