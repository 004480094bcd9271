package mcpclient_test

// The second round: the same families as trust_test.go, limits_test.go,
// bounds_test.go and flap_test.go, tried with inputs those tests do not
// have.

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/protocol/mcpclient"
)

// TestCloseKeepsFirstUse: the changes a Source made before it was closed
// reach OnChange before Close returns — above all the Connected change
// whose pins record the first use: were it lost, the next start would
// trust whatever the server lists then.
func TestCloseKeepsFirstUse(t *testing.T) {
	ts := serve(t, newDocServer(), nil)
	for i := range 50 {
		var pins atomic.Pointer[map[string]string]
		src := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, OnChange: func(c mcpclient.Change) {
			if c.Kind == mcpclient.Connected {
				pins.Store(&c.Pins)
			}
		}})
		src.Close()
		if p := pins.Load(); p == nil || len(*p) != 6 {
			t.Fatalf("open and close %d: the first use's pins were not told before Close returned", i)
		}
	}
}

// TestCompressedAnswerBound: an answer sent gzip-compressed is bounded as
// it is decompressed: a small body that inflates past MaxMessageBytes is
// refused before more than the bound is inflated.
func TestCompressedAnswerBound(t *testing.T) {
	const limit = 256 << 10
	var inflated atomic.Int64
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "tools/call" || req.Params.Name != "big" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		fmt.Fprintf(zw, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, req.ID)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 1024 { // 64 MiB inflated, about 64 KiB sent
			if _, err := zw.Write(chunk); err != nil {
				return true
			}
		}
		io.WriteString(zw, `"}]}}`)
		return true
	})
	client := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && res.Header.Get("Content-Type") == "application/json" {
			res.Body = &countingBody{ReadCloser: res.Body, n: &inflated}
		}
		return res, err
	})}
	src := open(t, mcpclient.Server{Name: "docs", URL: url, HTTPClient: client, MaxMessageBytes: limit})
	inflated.Store(0)
	if _, err := call(t, toolOf(t, src, "docs__big"), `{}`); !errors.Is(err, mcpclient.ErrTooLarge) {
		t.Fatalf("a gzip bomb: %v, want ErrTooLarge", err)
	}
	if n := inflated.Load(); n > limit+64<<10 {
		t.Errorf("%d bytes inflated before the answer was refused", n)
	}
}

// TestErrorAnswerBound: a huge body on an error status (which the SDK
// reads for a JSON-RPC error) is bounded too.
func TestErrorAnswerBound(t *testing.T) {
	const limit = 64 << 10
	var read atomic.Int64
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "tools/call" || req.Params.Name != "big" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Counted", "1")
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(strings.Repeat(" ", 32<<10))
		for range 2048 { // 64 MiB
			if _, err := w.Write(chunk); err != nil {
				return true
			}
		}
		return true
	})
	src := open(t, mcpclient.Server{Name: "docs", URL: url, HTTPClient: countingClient(&read), MaxMessageBytes: limit})
	read.Store(0)
	if _, err := call(t, toolOf(t, src, "docs__big"), `{}`); !errors.Is(err, mcpclient.ErrTooLarge) {
		t.Errorf("a 64 MiB error body: %v, want ErrTooLarge", err)
	}
	if n := read.Load(); n > limit+64<<10 {
		t.Errorf("%d bytes of an error body read", n)
	}
}

// TestInitializeAnswerBound: the answer to initialize, the first of a
// connection, is bounded as any: the Source does not connect, and says
// why.
func TestInitializeAnswerBound(t *testing.T) {
	const limit = 64 << 10
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "initialize" {
			return false
		}
		textAnswer(w, req.ID, 1<<20, true)
		return true
	})
	src, err := disconnects(t, mcpclient.Server{Name: "docs", URL: url, MaxMessageBytes: limit})
	if !errors.Is(err, mcpclient.ErrTooLarge) {
		t.Errorf("a 1 MiB answer to initialize: %v, want ErrTooLarge", err)
	}
	if st := src.Status(); st.Connected || !strings.Contains(st.LastError, "too large") {
		t.Errorf("status %+v", st)
	}
}

// TestToolCountAcrossPages: the tools of every page count toward
// MaxTools: a server cannot pass it by paging.
func TestToolCountAcrossPages(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "1"}, &mcp.ServerOptions{PageSize: 3})
	addTools(srv, "t", 10)
	ts := serve(t, srv, nil)
	if _, err := disconnects(t, mcpclient.Server{Name: "paged", URL: ts.URL, MaxTools: 9}); !errors.Is(err, mcpclient.ErrTooManyTools) {
		t.Errorf("10 tools in pages of 3 under a bound of 9: %v", err)
	}
	if st := open(t, mcpclient.Server{Name: "paged", URL: ts.URL, MaxTools: 10}).Status(); !st.Connected || st.Tools != 10 {
		t.Errorf("10 tools in pages of 3 under a bound of 10: %+v", st)
	}
}

// TestRefusedToolsCount: tools refused (their names) count toward
// MaxTools all the same: 10,000 tools of bad names are no cheaper.
func TestRefusedToolsCount(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bad", Version: "1"}, nil)
	addTools(srv, "bad.name.", 200)
	ts := serve(t, srv, nil)
	if _, err := disconnects(t, mcpclient.Server{Name: "bad", URL: ts.URL}); !errors.Is(err, mcpclient.ErrTooManyTools) {
		t.Errorf("200 tools of bad names: %v, want ErrTooManyTools", err)
	}
}

// TestFlappingPresence: a tool the server offers and withdraws, again
// and again, is told of once: held as new the first time, then held again
// in the same definition.
func TestFlappingPresence(t *testing.T) {
	srv := newDocServer()
	ts := serve(t, srv, nil)
	rec := newRecorder()
	src := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, OnChange: rec.on})
	for i := range 15 {
		srv.AddTool(&mcp.Tool{Name: "ghost", Description: "Now you see it.", InputSchema: objectSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("x"), nil })
		rec.until(t, fmt.Sprint("ghost held, round ", i), func() bool { return heldAs(src, "ghost", "Now you see it.") })
		srv.RemoveTools("ghost")
		rec.until(t, fmt.Sprint("ghost gone, round ", i), func() bool { return heldAs(src, "ghost", "") })
	}
	if n := rec.count(mcpclient.Held, "ghost"); n != 1 {
		t.Errorf("15 appearances: told %d times, want once", n)
	}
}

// fakeClock is the clock of a Source's waits: each wait is told on
// waits, and ends when the test says.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	waits chan time.Duration
	fire  chan chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Unix(1e9, 0), waits: make(chan time.Duration, 16), fire: make(chan chan time.Time, 16)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.fire <- ch
	c.waits <- d
	return ch
}

// next is the wait the Source asks for next; it ends it.
func (c *fakeClock) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.waits:
		(<-c.fire) <- time.Time{}
		return d
	case <-time.After(15 * time.Second):
		t.Fatal("the Source made no wait")
		return 0
	}
}

// reconnected ends the Source's waits until it tells it connected again,
// and returns them: one after a drop, and one more each time a connection
// attempt fails (it may: the client can try a pooled connection the
// server has just closed).
func (c *fakeClock) reconnected(t *testing.T, connected <-chan struct{}) []time.Duration {
	t.Helper()
	var waits []time.Duration
	for {
		select {
		case <-connected:
			return waits
		case d := <-c.waits:
			(<-c.fire) <- time.Time{}
			waits = append(waits, d)
		case <-time.After(30 * time.Second):
			t.Fatalf("the Source neither connected nor waited (waits so far %v)", waits)
		}
	}
}

// TestReconnectBackoff: a server that drops every connection as soon as
// it is made is connected to again after a wait twice as long each time,
// not at once; a connection that lasted starts the waits afresh.
func TestReconnectBackoff(t *testing.T) {
	ts := serve(t, newDocServer(), nil)
	clock := newFakeClock()
	connected := make(chan struct{}, 16)
	open(t, mcpclient.WithClock(mcpclient.Server{Name: "docs", URL: ts.URL, OnChange: func(c mcpclient.Change) {
		if c.Kind == mcpclient.Connected {
			connected <- struct{}{}
		}
	}}, clock.now, clock.after))
	if waits := clock.reconnected(t, connected); len(waits) != 0 {
		t.Fatalf("waits %v before the first connection", waits)
	}
	var waits []time.Duration
	for range 5 {
		ts.CloseClientConnections() // the server drops the connection at once
		got := clock.reconnected(t, connected)
		if len(got) == 0 {
			t.Fatal("connected again after a drop without a wait")
		}
		waits = append(waits, got...)
	}
	// Each wait twice the one before (a failed attempt between two drops
	// counts as one more), from 250ms.
	for i, d := range waits {
		if want := min(250*time.Millisecond<<i, 30*time.Second); d != want {
			t.Errorf("waits %v, want each twice the one before from 250ms", waits)
			break
		}
	}
	clock.advance(time.Minute) // this one lasted
	ts.CloseClientConnections()
	if got := clock.reconnected(t, connected); len(got) == 0 || got[0] != 250*time.Millisecond {
		t.Errorf("after a connection that lasted: waits %v, want 250ms first", got)
	}
}

// instantAfter is a clock's after whose waits end at once.
func instantAfter(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// TestRelistPaced: a server that says its tools changed again and again
// (notifications/tools/list_changed) is listed again at once 64 times,
// then once a second: it cannot make the Source list (and parse, and
// log) as fast as it can notify.
func TestRelistPaced(t *testing.T) {
	srv := newDocServer()
	ts := serve(t, srv, nil)
	clock := newFakeClock()
	rec := newRecorder()
	src := open(t, mcpclient.WithClock(mcpclient.Server{Name: "docs", URL: ts.URL, OnChange: rec.on}, clock.now, clock.after))
	flip := func(i int) string {
		desc := fmt.Sprint("Read a document, version ", i)
		srv.AddTool(readDoc(desc))
		return desc
	}
	for i := range 64 {
		desc := flip(i)
		rec.until(t, fmt.Sprint("version ", i, " held"), func() bool { return heldAs(src, "read_doc", desc) })
	}
	var desc string
	for i := 64; i < 67; i++ {
		desc = flip(i)
		if d := clock.next(t); d != time.Second {
			t.Fatalf("listing %d: a wait of %v, want 1s", i, d)
		}
		rec.until(t, fmt.Sprint("version ", i, " held"), func() bool { return heldAs(src, "read_doc", desc) })
	}
	// A quiet minute gives the burst back: the next listings are not
	// paced. A notification whose listing waits out its pace across the
	// quiet minute (the server debounces them, so one may come late)
	// does not push the burst's return later: the quiet is measured from
	// when it was taken. Here one is made to: the same definition added
	// again notifies with nothing changed, and its paced wait is ended
	// only after the minute.
	srv.AddTool(readDoc(desc))
	select {
	case d := <-clock.waits:
		if d != time.Second {
			t.Fatalf("a late notification's listing: a wait of %v, want 1s", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the notification with nothing changed asked no listing")
	}
	clock.advance(time.Minute) // quiet
	(<-clock.fire) <- time.Time{}
	var paced atomic.Int64
	stop := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			select {
			case <-clock.waits:
				paced.Add(1)
				(<-clock.fire) <- time.Time{}
			case <-stop:
				return
			}
		}
	}()
	for i := 67; i < 70; i++ {
		desc := flip(i)
		rec.until(t, fmt.Sprint("version ", i, " held after a quiet minute"), func() bool { return heldAs(src, "read_doc", desc) })
	}
	close(stop)
	<-served
	if n := paced.Load(); n > 0 {
		t.Errorf("after a quiet minute, three listings asked %d paced waits, want the burst back (none)", n)
	}
}

// TestSSEBoundCRLF: events whose lines end with CRLF, padded with comment
// lines, are measured as the SDK's decoder measures them: one of exactly
// MaxMessageBytes is taken, one byte more refused with a *LimitError —
// never refused by the decoder unexplained, nor taken past the bound.
func TestSSEBoundCRLF(t *testing.T) {
	const limit = 64 << 10
	var size atomic.Int64
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "tools/call" || req.Params.Name != "big" {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		head := "event: message\r\n: " + strings.Repeat("c", 1000) + "\r\n" // a comment line, then data
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, req.ID)
		tail := `"}]}}` + "\r\n\r\n"
		n := int(size.Load()) - len(head) - len("data: ") - len(body) - len(tail)
		io.WriteString(w, head+"data: "+body+strings.Repeat("x", n)+tail)
		return true
	})
	src := open(t, mcpclient.Server{Name: "docs", URL: url, MaxMessageBytes: limit})
	size.Store(limit)
	if _, err := call(t, toolOf(t, src, "docs__big"), `{}`); err != nil {
		t.Fatalf("an event of exactly the bound: %v", err)
	}
	size.Store(limit + 1)
	if _, err := call(t, toolOf(t, src, "docs__big"), `{}`); !errors.Is(err, mcpclient.ErrTooLarge) {
		t.Fatalf("an event one byte past the bound: %v, want ErrTooLarge", err)
	}
}

// TestRefusedNameClipped: a tool refused for a name of a megabyte is
// named in Status.Refused (GET /v1/mcp, the log) by a few bytes of it, not
// the megabyte, twice.
func TestRefusedNameClipped(t *testing.T) {
	huge := strings.Repeat("n", 1<<20)
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "tools/list" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":%q,"inputSchema":{"type":"object"}},{"name":"ok","inputSchema":{"type":"object"}}]}}`, req.ID, huge)
		return true
	})
	src := open(t, mcpclient.Server{Name: "docs", URL: url})
	r := src.Status().Refused
	if len(r) != 1 || len(r[0].Name) > 100 || len(r[0].Reason) > 200 || !strings.HasPrefix(r[0].Name, "nnnn") || !strings.Contains(r[0].Reason, "longer than 64") {
		t.Errorf("refused: %d entries, the first's name %d bytes, its reason %.300q", len(r), len(r[0].Name), r[0].Reason)
	}
	if got := namesOf(src); !slices.Equal(got, []string{"docs__ok"}) {
		t.Errorf("serving %v", got)
	}
}
