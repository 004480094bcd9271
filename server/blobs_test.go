package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// TestBlobsServe: through the API, on every store: an attachment past
// the threshold is kept once however often it is sent, read back by
// GET /v1/blobs/{digest} (its media type named by the session), by the
// transcript and by the model; a retry with the same Idempotency-Key is
// the same message; max_blob_bytes and blob_quota_bytes refuse a message
// with 413 blob_quota_exceeded, appending nothing.
func TestBlobsServe(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testBlobsServe(t, nil) })
	t.Run("file", func(t *testing.T) {
		st, err := file.Open(t.TempDir(), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		testBlobsServe(t, st)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{})
		testBlobsServe(t, openRedis(t, rs.URL()))
	})
	t.Run("redis-cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		c := redistest.StartCluster(t, 3)
		testBlobsServe(t, openRedis(t, "redis+cluster://"+strings.Join(c.Addrs(), ",")))
	})
}

func testBlobsServe(t *testing.T, store storage.Storage) {
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.BlobQuotaBytes, acme.MaxBlobBytes = 200_000, 150_000
		c.Tenants["acme"] = acme
	}})
	rng := rand.New(rand.NewPCG(7, 7))
	noise := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	image := noise(100_000)
	message := func(text string, parts ...[]byte) string {
		var b strings.Builder
		b.WriteString(`{"text":"` + text + `","parts":[`)
		for i, p := range parts {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"type":"image","mime":"image/png","name":"cat.png","data":"` + base64.StdEncoding.EncodeToString(p) + `"}`)
		}
		b.WriteString("]}")
		return b.String()
	}
	tenant, err := storage.Prefix(ts.store, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	blobs := tenant.(storage.Blobs)
	count := func() int {
		infos, err := blobs.ListBlobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(infos)
	}
	inputs := func() int {
		events, err := tenant.Load(context.Background(), "pics")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range events {
			if e.Input != nil {
				n++
			}
		}
		return n
	}

	for i, key := range []string{"first", "second"} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/pics/messages?wait=true", message("look", image), "Idempotency-Key", key); code != 200 {
			t.Fatalf("message %d: %d %s", i+1, code, body)
		}
	}
	if n := count(); n != 1 {
		t.Errorf("the image sent twice: %d blobs, want 1", n)
	}
	// A retry of the first message is that message, not another one.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/pics/messages?wait=true", message("look", image), "Idempotency-Key", "first"); code != 200 {
		t.Errorf("a retry with its Idempotency-Key: %d %s", code, body)
	}
	if n := inputs(); n != 2 {
		t.Errorf("%d inputs after two messages and a retry, want 2", n)
	}
	// The model saw the image.
	reqs := ts.model.Requests()
	if last := reqs[len(reqs)-1]; len(last.Messages) == 0 || !hasImage(last, image) {
		t.Error("the model's last request does not carry the image")
	}

	digest := storage.BlobDigest(image)
	get := func(path string, header ...string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+ts.acme)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, b
	}
	code, h, body := get("/v1/blobs/" + digest + "?session=pics")
	if code != 200 || !bytes.Equal(body, image) || h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Disposition"), "cat.png") {
		t.Errorf("GET the blob with its session: %d, %d bytes, %q, %q", code, len(body), h.Get("Content-Type"), h.Get("Content-Disposition"))
	}
	// An uploaded page cannot run as the server's: no sniffing, a
	// sandboxing policy; and the bytes of a digest never change.
	if csp, cc := h.Get("Content-Security-Policy"), h.Get("Cache-Control"); csp != "default-src 'none'; sandbox" || !strings.Contains(cc, "immutable") {
		t.Errorf("the blob's headers: Content-Security-Policy %q, Cache-Control %q", csp, cc)
	}
	if code, h, _ := get("/v1/blobs/" + digest); code != 200 || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET the blob alone: %d %q", code, h.Get("Content-Type"))
	}
	if code, _, _ := get("/v1/blobs/"+digest, "If-None-Match", h.Get("ETag")); code != 304 {
		t.Errorf("GET with its ETag: %d, want 304", code)
	}
	if code, _, body := get("/v1/blobs/sha256:" + strings.Repeat("e", 64)); code != 404 || !strings.Contains(string(body), "not_found") {
		t.Errorf("GET a missing blob: %d %s", code, body)
	}
	if code, _, body := get("/v1/blobs/../etc"); code != 404 && code != 400 {
		t.Errorf("GET a bad digest: %d %s", code, body)
	}
	if code, _, body := get("/v1/blobs/sha256:ABC"); code != 400 {
		t.Errorf("GET a bad digest: %d %s", code, body)
	}
	if code, _ := ts.do(t, ts.beta, "GET", "/v1/blobs/"+digest, ""); code != 404 {
		t.Errorf("another tenant GETs the blob: %d, want 404", code)
	}
	// The transcript carries the bytes.
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/pics/transcript", ""); code != 200 || !strings.Contains(body, base64.StdEncoding.EncodeToString(image)) {
		t.Errorf("the transcript: %d, without the image", code)
	}

	// Past max_blob_bytes, past blob_quota_bytes: 413, nothing kept.
	for _, c := range []struct {
		name  string
		parts [][]byte
		names string
	}{
		{"one attachment past max_blob_bytes", [][]byte{noise(160_000)}, "max_blob_bytes (150000)"},
		{"attachments past blob_quota_bytes", [][]byte{noise(70_000), noise(70_000)}, "blob_quota_bytes (200000; 100000 used)"},
	} {
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/pics/messages", message("more", c.parts...))
		if code != 413 || !strings.Contains(body, `"blob_quota_exceeded"`) || !strings.Contains(body, c.names) {
			t.Errorf("%s: %d %s, want 413 blob_quota_exceeded naming %s", c.name, code, body, c.names)
		}
	}
	if n, m := inputs(), count(); n != 2 || m != 1 {
		t.Errorf("after the refused messages: %d inputs and %d blobs, want 2 and 1", n, m)
	}
	// Another tenant has no quota, and its blobs are its own.
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/pics/messages?wait=true", message("mine", image)); code != 200 {
		t.Fatalf("beta's message: %d %s", code, body)
	}
	if code, _ := ts.do(t, ts.beta, "GET", "/v1/blobs/"+digest, ""); code != 200 {
		t.Errorf("beta GETs its own copy: %d", code)
	}
}

// hasImage tells whether a model request carries data in a part.
func hasImage(req model.Request, data []byte) bool {
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if bytes.Equal(p.Data, data) {
				return true
			}
		}
	}
	return false
}

// TestUIChatBlobs: a file of the UI message stream past the threshold is
// kept by reference, reaches the model whole, and the transcript carries
// it back; past the tenant's quota the chat is refused (413), nothing
// appended.
func TestUIChatBlobs(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.BlobQuotaBytes = 150_000
		c.Tenants["acme"] = acme
	}})
	image := bytes.Repeat([]byte("\x89PNG big "), 10_000) // 100 000 bytes
	body := func(id string, data []byte) string {
		return `{"id":"` + id + `","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[` +
			`{"type":"file","mediaType":"image/png","filename":"a.png","url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(data) + `"},` +
			`{"type":"text","text":"what is this?"}]}]}`
	}
	if res, data := ts.uiChunks(t, "POST", "/v1/ui/chat", body("ui-blob", image)); res.StatusCode != 200 || !strings.Contains(types(t, data), "finish") {
		t.Fatalf("%d %v", res.StatusCode, data)
	}
	tenant, _ := storage.Prefix(ts.store, "acme:")
	events, err := tenant.Load(context.Background(), "ui-blob")
	if err != nil || len(events) == 0 || events[0].Input == nil || events[0].Input.Parts[1].Blob != storage.BlobDigest(image) {
		t.Fatalf("the ledger does not keep the file by reference: %v", err)
	}
	reqs := ts.model.Requests()
	if !hasImage(reqs[len(reqs)-1], image) {
		t.Error("the model did not get the file")
	}
	if _, tr := ts.do(t, ts.acme, "GET", "/v1/sessions/ui-blob/transcript", ""); !strings.Contains(tr, base64.StdEncoding.EncodeToString(image)) {
		t.Error("the transcript does not carry the file")
	}
	other := bytes.Repeat([]byte("\x89PNG other "), 9_000)
	code, resp := ts.do(t, ts.acme, "POST", "/v1/ui/chat", body("ui-blob-2", other), "Content-Type", "application/json")
	if code != 413 || !strings.Contains(resp, "blob_quota_bytes") {
		t.Errorf("a file past the quota: %d %s", code, resp)
	}
	if events, _ := tenant.Load(context.Background(), "ui-blob-2"); len(events) != 0 {
		t.Errorf("the refused chat appended %d events", len(events))
	}
}
