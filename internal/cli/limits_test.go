//go:build unix

package cli_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// trickle sends a request over a new connection to addr: its head, then
// its body of n bytes one byte every gap. It returns the connection, for
// the response.
func trickle(t *testing.T, addr, head string, n int, gap time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n", head, n); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range n {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	return c
}

// TestServeSlowBodiesAndIdleConnections: serve bounds the time a body may
// take to arrive (body_timeout) on every route that reads one — a message,
// a decision, a module upload, the UI chat route — answering 408 and
// closing the connection; and it closes a kept-alive connection that stays
// idle past idle_timeout. A body that arrives in time is read as ever.
func TestServeSlowBodiesAndIdleConnections(t *testing.T) {
	bin := needBinary(t)
	model := slowModel(t)
	config := writeServeConfig(t, "file:"+t.TempDir(), model.URL(), "body_timeout: 1s\nidle_timeout: 1s\nplugins_dir: "+t.TempDir()+"\n")
	s := startServe(t, "serve", bin, config)
	addr := strings.TrimPrefix(s.url, "http://")
	auth := "Authorization: Bearer " + serveKey + "\r\n"
	for _, route := range []string{
		"POST /v1/sessions/s1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
		"POST /v1/approvals/appr_1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
		"PUT /v1/plugins/slow HTTP/1.1\r\nHost: x\r\n",
		"POST /v1/ui/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
	} {
		name, _, _ := strings.Cut(route, " HTTP/")
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			c := trickle(t, addr, route+auth, 1000, 200*time.Millisecond)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a body sent one byte every 200ms: %v after %v", err, time.Since(start))
			}
			body, _ := io.ReadAll(res.Body)
			took := time.Since(start)
			if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_timeout") {
				t.Fatalf("%d %s after %v, want 408 naming body_timeout", res.StatusCode, body, took)
			}
			if took > 5*time.Second {
				t.Errorf("answered after %v, want about body_timeout (1s)", took)
			}
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("the connection is still open after the 408: %v", err)
			}
		})
	}
	t.Run("in time", func(t *testing.T) {
		s.must("POST", "/v1/sessions/s2/messages?wait=true", `{"text":"hello"}`, http.StatusOK, nil)
	})
	t.Run("idle", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: %v %v", res, err)
		}
		io.ReadAll(res.Body)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("a connection idle past idle_timeout (1s): %v, want it closed", err)
		}
	})
}

// TestMCPSlowBodiesAndIdleConnections: mcp --http bounds a POST's body as
// serve does (--body-timeout: 408, the connection closed), and closes a
// kept-alive connection idle past --idle-timeout.
func TestMCPSlowBodiesAndIdleConnections(t *testing.T) {
	bin := needBinary(t)
	const key = "mcp-limits-key"
	url, _ := mcpHTTP(t, bin, key, "--plugins", t.TempDir(), "--body-timeout", "1s", "--idle-timeout", "1s")
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	start := time.Now()
	c := trickle(t, addr, "POST /mcp HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer "+key+"\r\n", 1000, 200*time.Millisecond)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body sent one byte every 200ms: %v after %v", err, time.Since(start))
	}
	if res.StatusCode != http.StatusRequestTimeout || time.Since(start) > 5*time.Second {
		t.Fatalf("%d after %v, want 408 after about 1s", res.StatusCode, time.Since(start))
	}
	io.ReadAll(res.Body)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection is still open after the 408: %v", err)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	br := bufio.NewReader(idle)
	fmt.Fprintf(idle, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if res, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		io.ReadAll(res.Body)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("a connection idle past --idle-timeout (1s): %v, want it closed", err)
	}
}
