package server_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
	"github.com/agentichost/agentic/storage/file"
)

// buildArchive writes an archive of the sessions (id → events) and blobs.
func buildArchive(t *testing.T, sessions map[string][]ledger.Event, blobs ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := archive.NewWriter(&buf, "")
	for id, events := range sessions {
		if err := w.AddSession(id, events); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range blobs {
		if err := w.AddBlob(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// finished returns the events of a finished session of beta's.
func (ts *testServer) finished(t *testing.T, id string) []ledger.Event {
	t.Helper()
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("message: %d %s", code, body)
	}
	a, err := archive.Read(bytes.NewReader(ts.exportOf(t, ts.beta, id)), archive.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return a.Sessions[0].Events
}

// pattern returns n bytes that no other call's with another seed equal.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*31+i/256)
	}
	return b
}

// TestImportBounds: an import is refused, nothing imported, when a blob of
// its archive passes the tenant's max_blob_bytes (413
// blob_quota_exceeded), when its blobs would pass the tenant's
// blob_quota_bytes (413 blob_quota_exceeded), and when a session holds an
// event twice (400); before the bounds, all three imported.
func TestImportBounds(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.MaxBlobBytes, acme.BlobQuotaBytes = 5000, 9000
		c.Tenants["acme"] = acme
	}})
	events := ts.finished(t, "src")
	for _, tc := range []struct {
		name, code, want string
		status           int
		data             []byte
	}{
		{"blob past max_blob_bytes", "blob_quota_exceeded", "max_blob_bytes", 413,
			buildArchive(t, map[string][]ledger.Event{"s": events}, pattern(1, 20_000))},
		{"blobs past blob_quota_bytes", "blob_quota_exceeded", "quota", 413,
			buildArchive(t, map[string][]ledger.Event{"s": events}, pattern(2, 4000), pattern(3, 4000), pattern(4, 4000))},
		{"duplicated event", "invalid", "appears twice", 400,
			buildArchive(t, map[string][]ledger.Event{"s": append(append([]ledger.Event{}, events...), events[0])})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import", tc.data)
			if code != tc.status || !strings.Contains(body, tc.code) || !strings.Contains(body, tc.want) || !strings.Contains(body, "nothing was imported") {
				t.Errorf("import: %d %s, want %d %s saying %q and that nothing was imported", code, body, tc.status, tc.code, tc.want)
			}
			if n := len(missingOK(t, ts, "acme:s")); n != 0 {
				t.Errorf("a refused import left %d events", n)
			}
			view, _ := storage.Prefix(ts.store, "acme:")
			if infos, _ := view.(storage.Blobs).ListBlobs(t.Context()); len(infos) != 0 {
				t.Errorf("a refused import left %d blobs", len(infos))
			}
		})
	}
	// Within the bounds, the same import passes.
	if code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import",
		buildArchive(t, map[string][]ledger.Event{"s": events}, pattern(2, 4000), pattern(3, 4000))); code != 200 {
		t.Errorf("an import within the bounds: %d %s", code, body)
	}
}

// missingOK returns the events of a session of the server's store.
func missingOK(t *testing.T, ts *testServer, id string) []ledger.Event {
	t.Helper()
	events, err := ts.store.Load(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestImportsAtOnce: while an import's body is on its way, a second import
// of the tenant is refused (429, rate_limit.concurrent_imports) and one of
// another tenant too (503, max_imports of 1); the first then completes, and
// so does the tenant's next, leaving no temporary file. Before the bounds,
// every import went on at once, each holding its archive in memory.
func TestImportsAtOnce(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	watch := &readWatch{waiting: make(chan struct{}, 1)}
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.MaxImports = 1 }, Listener: func(l net.Listener) net.Listener {
		watch.Listener = l
		return watch
	}})
	events := ts.finished(t, "src")
	data := buildArchive(t, map[string][]ledger.Event{"s": events})
	other := buildArchive(t, map[string][]ledger.Event{"t": events})
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /v1/sessions/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", ts.acme, len(data))
	raw := append([]byte(head), data[:len(data)/2]...)
	watch.sent.Store(int64(len(raw)))
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	<-watch.waiting // the first import is under way, waiting for the rest of its body
	watch.sent.Store(0)
	if code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import", other); code != 429 || !strings.Contains(body, "concurrent_imports") {
		t.Errorf("a second import of the tenant: %d %s, want 429 naming concurrent_imports", code, body)
	}
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import", other); code != 503 || !strings.Contains(body, "max_imports") {
		t.Errorf("an import of another tenant past max_imports: %d %s, want 503 naming max_imports", code, body)
	}
	if _, err := conn.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("the first import: %d, want 200", res.StatusCode)
	}
	if code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import", other); code != 200 {
		t.Errorf("the tenant's next import: %d %s", code, body)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("the imports left %d temporary files", len(entries))
	}
}

// readWatch wraps a listener so that the test learns when the server waits
// for more of a connection's bytes than were sent: each Read that starts
// with every byte sent read already.
type readWatch struct {
	net.Listener
	sent    atomic.Int64 // set by the test
	waiting chan struct{}
}

func (l *readWatch) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, l: l}, nil
}

type watchedConn struct {
	net.Conn
	l    *readWatch
	read int64
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if sent := c.l.sent.Load(); sent > 0 && c.read >= sent {
		select {
		case c.l.waiting <- struct{}{}:
		default:
		}
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

// TestImportDeclaredLength: an import that declares a body of 200 MiB and
// sends 16 bytes costs the server no memory of that size while it waits
// for the rest; before, it allocated the declared length at once.
func TestImportDeclaredLength(t *testing.T) {
	declaredLength(t, nil, "/v1/sessions/import")
}

// declaredLength posts to path a body that declares 200 MiB and sends 16
// bytes, on a server setup mutates, and fails t if the server allocated
// anything near the declared length while it waits for the rest.
func declaredLength(t *testing.T, mutate func(*server.Config), path string) {
	t.Helper()
	watch := &readWatch{waiting: make(chan struct{}, 1)}
	ts := startServer(t, serverSetup{Mutate: mutate, Listener: func(l net.Listener) net.Listener {
		watch.Listener = l
		return watch
	}})
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n0123456789abcdef", path, ts.acme, 200<<20)
	watch.sent.Store(int64(len(raw)))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	<-watch.waiting // the server read all of it, and waits for more
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 64<<20 {
		t.Errorf("the server allocated %d MiB for a body of 16 bytes that declared 200 MiB", grew>>20)
	}
}

// TestImportRunsPassAdmission: an archive whose two sessions each have an
// open run (their hosts died mid-run) is refused whole (429, nothing
// imported) when the tenant may run one at once (concurrent_runs: 1), and
// when the process may (max_runs: 1, 503); with room for both, it imports
// and both runs are resumed, and end. Before, the import took them all,
// and the resumes passed every run limit.
func TestImportRunsPassAdmission(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(c *server.Config)
		status int
		want   string
	}{
		{"concurrent_runs", func(c *server.Config) {
			acme := c.Tenants["acme"]
			acme.RateLimit.ConcurrentRuns = 1
			c.Tenants["acme"] = acme
		}, 429, "runs in flight"},
		{"max_runs", func(c *server.Config) { c.MaxRuns = 1 }, 503, "max_runs"},
		{"room", func(c *server.Config) {
			acme := c.Tenants["acme"]
			acme.RateLimit.ConcurrentRuns = 2
			c.Tenants["acme"] = acme
		}, 200, `"sessions":[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, serverSetup{Mutate: tc.mutate})
			open := map[string][]ledger.Event{}
			for _, id := range []string{"o1", "o2"} {
				events := ts.finished(t, id)
				if events[len(events)-1].RunEnd == nil {
					t.Fatalf("the last event of %s is a %s, want a run-end", id, events[len(events)-1].Kind)
				}
				open[id] = events[:len(events)-1] // the run never ended
			}
			code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import", buildArchive(t, open))
			if code != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("import of two sessions with open runs: %d %s, want %d saying %q", code, body, tc.status, tc.want)
			}
			if code != 200 {
				if !strings.Contains(body, "nothing was imported") {
					t.Errorf("the refusal %s does not say that nothing was imported", body)
				}
				for _, id := range []string{"o1", "o2"} {
					if n := len(missingOK(t, ts, "acme:"+id)); n != 0 {
						t.Errorf("a refused import left %d events in %s", n, id)
					}
				}
				return
			}
			for _, id := range []string{"o1", "o2"} {
				ts.waitState(t, ts.acme, id, "completed")
			}
		})
	}
}

// heapWatch is a file store that measures the live heap (after a GC) when
// an import writes a session: at an Append's start (the events in hand),
// and as a ReplaceSession reads its last event.
type heapWatch struct {
	*file.Store
	mu   sync.Mutex
	peak uint64
}

func (s *heapWatch) measure() {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.mu.Lock()
	s.peak = max(s.peak, m.HeapAlloc)
	s.mu.Unlock()
}

func (s *heapWatch) Append(ctx context.Context, id string, events ...ledger.Event) error {
	if len(events) > 1000 {
		s.measure()
	}
	return s.Store.Append(ctx, id, events...)
}

func (s *heapWatch) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	n := 0
	counted := func(yield func(ledger.Event, error) bool) {
		for e, err := range events {
			if n++; n == 20_000 {
				s.measure()
			}
			if !yield(e, err) {
				return
			}
		}
	}
	return s.Store.ReplaceSession(ctx, id, version, counted)
}

// bigArchive writes, without holding it, an archive of one session of n
// events of about size bytes each (pokes, which start no run).
func bigArchive(t *testing.T, n, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	text := strings.Repeat("all work and no play ", size/21)
	line := func(i int) []byte {
		b, err := ledger.Encode(ledger.Event{ID: fmt.Sprintf("evt_%010d", i), Kind: ledger.KindPoke, RunID: "run_1",
			Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Poke: &ledger.Poke{Text: text}})
		if err != nil {
			t.Fatal(err)
		}
		return append(b, '\n')
	}
	per := int64(len(line(0)))
	tw.WriteHeader(&tar.Header{Name: "sessions/big.jsonl", Mode: 0o600, Size: per * int64(n), Typeflag: tar.TypeReg})
	for i := range n {
		tw.Write(line(i))
	}
	man := fmt.Sprintf(`{"format":"agentic-host-archive","version":1,"created":"2026-01-01T00:00:00Z","sessions":[{"id":"big","events":%d}],"blobs":[]}`, n)
	tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o600, Size: int64(len(man)), Typeflag: tar.TypeReg})
	tw.Write([]byte(man))
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestImportBoundedMemory: an archive of a few hundred KiB that holds a
// session of 80 MiB imports with the heap growing by a few MiB (an event at
// a time); before, the import held the whole session, read and decoded,
// at once (the heap grew by well over 80 MiB).
func TestImportBoundedMemory(t *testing.T) {
	st, err := file.Open(t.TempDir(), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	store := &heapWatch{Store: st}
	ts := startServer(t, serverSetup{Store: store})
	data := bigArchive(t, 20_000, 4096)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/import", data)
	if code != 200 {
		t.Fatalf("import of %d KiB (80 MiB uncompressed): %d %.300s", len(data)>>10, code, body)
	}
	store.mu.Lock()
	peak := store.peak
	store.mu.Unlock()
	if peak == 0 {
		t.Fatal("the session was not written")
	}
	grew := int64(peak) - int64(before.HeapAlloc)
	t.Logf("the heap grew by %d KiB", grew>>10)
	if grew > 24<<20 {
		t.Errorf("the heap grew by %d MiB while an archive of %d KiB (80 MiB uncompressed) was imported", grew>>20, len(data)>>10)
	}
}

// TestBodyDeclaredLength: a message's body that declares its route's
// limit and sends 16 bytes holds what it sent: the server allocates as the
// body arrives, never from the declared length (here a limit of 256 MiB;
// before, the 200 MiB declared were allocated before a byte was read).
func TestBodyDeclaredLength(t *testing.T) {
	declaredLength(t, func(c *server.Config) { c.MaxRequestBytes = 256 << 20 }, "/v1/sessions/s/messages")
}
