//go:build unix

package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
)

// filterProxy forwards TCP connections to target, the server's bytes as
// they come, each write of a client through its connection's onWrite (the
// bytes read; newFilter makes one for each connection) first; it returns
// its address.
func filterProxy(t *testing.T, target string, newFilter func() (onWrite func([]byte))) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer s.Close()
				io.Copy(c, s)
			}()
			onWrite := newFilter()
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						onWrite(buf[:n])
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// slowProxy forwards TCP connections to a Redis server, holding back by
// delay each write of a client whose bytes hold one of slow (a command's
// name, as the client spells it): a key-value store that is slow to take a
// value, and quick with everything else.
func slowProxy(t *testing.T, target string, delay time.Duration, slow ...string) string {
	t.Helper()
	return filterProxy(t, target, func() func([]byte) {
		return func(b []byte) {
			low := bytes.ToLower(b)
			for _, w := range slow {
				if bytes.Contains(low, []byte(w)) {
					time.Sleep(delay)
					return
				}
			}
		}
	})
}

// TestServeInboxNeverLagsTheState: whoever learns that a run waits for a
// person — the tenant's feed says approval-requested, the session's state
// is approval_required — finds the request in GET /v1/approvals at that
// moment, on every host, though the inbox's store is slow to write (here,
// serve reaches Redis through a proxy that holds back every HSET by
// 300 ms).
func TestServeInboxNeverLagsTheState(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	proxy := slowProxy(t, rds.Addr(), 300*time.Millisecond, "hset")
	blog, _ := blogServer(t)
	blogURL, _ := url.Parse(blog.URL)
	model := slowModel(t)
	dir := t.TempDir()
	plugins := filepath.Join(dir, "acme")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "publish_post.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/publish_post"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`storage: redis://%s/0
plugins_dir: %s
plugin_cache_dir: %s
lease_ttl: 2s
model:
  base_url: %s
tenants:
  acme:
    keys: [%q]
    models: [fake/echo]
    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
      compile_timeout: 5m
    plugin_config:
      publish_post:
        endpoint: %s/posts
`, proxy, dir, filepath.Join(plugintest.CacheDir(), "inbox-serve"), model.URL(), server.HashKey(serveKey), blogURL.Host, blog.URL)
	config := filepath.Join(dir, "agentic.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Two hosts on one Redis: the runs go to A, whose feed is read; the
	// state is read on B, and the inbox on both.
	a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
	b := startServe(t, "B", bin, config, "--set", "host_id=host-b")
	waitPlugin(a)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/feed", nil)
	req.Header.Set("Authorization", "Bearer "+serveKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/feed: %v %v", res, err)
	}
	changes := make(chan map[string]string, 64)
	go func() {
		defer close(changes)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var c map[string]string
				if json.Unmarshal([]byte(data), &c) == nil {
					changes <- c
				}
			}
		}
	}()
	listed := func(s *serveProc, session, approval string) bool {
		var inbox struct {
			Approvals []consoleApproval `json:"approvals"`
		}
		s.must("GET", "/v1/approvals", "", http.StatusOK, &inbox)
		for _, ap := range inbox.Approvals {
			if ap.SessionID == session && (approval == "" || ap.ApprovalID == approval) {
				return true
			}
		}
		return false
	}

	const n = 3
	var stateChecks atomic.Int64
	for i := range n {
		session := fmt.Sprintf("publish-%d", i)
		a.post(session, fmt.Sprintf("publish_post title=t%d body=b%d", i, i))
		// The state, polled on B: once it says approval_required, the
		// inbox lists the request, on both hosts.
		stop := make(chan struct{})
		polled := make(chan error, 1)
		go func() {
			defer close(polled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b.state(session) == "approval_required" {
					stateChecks.Add(1)
					if !listed(b, session, "") || !listed(a, session, "") {
						polled <- fmt.Errorf("session %s is approval_required, and the inbox does not list its request", session)
						return
					}
					return
				}
			}
		}()
		// The feed, read on A: at approval-requested, the inbox lists it.
		deadline := time.After(60 * time.Second)
	feed:
		for {
			select {
			case c, ok := <-changes:
				if !ok {
					t.Fatal("the feed ended")
				}
				if c["session_id"] == session && c["type"] == "approval-requested" {
					if !listed(a, session, c["approval_id"]) {
						t.Errorf("the feed says %s's request %s waits, and A's inbox does not list it", session, c["approval_id"])
					}
					if !listed(b, session, c["approval_id"]) {
						t.Errorf("the feed says %s's request %s waits, and B's inbox does not list it", session, c["approval_id"])
					}
					break feed
				}
			case <-deadline:
				t.Fatalf("no approval-requested change for %s in the feed", session)
			}
		}
		if err := <-polled; err != nil {
			t.Error(err)
		}
		close(stop)
	}
	if stateChecks.Load() != n {
		t.Errorf("the state was seen approval_required %d times, want %d", stateChecks.Load(), n)
	}
}
