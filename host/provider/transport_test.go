package provider_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
)

// TestTransportBounds: a server that never answers fails within the header
// bound, one that streams steadily is never cut by the idle bound, and
// the zero Transport passes requests through.
func TestTransportBounds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mute":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/steady":
			for i := range 10 {
				w.Write([]byte(strings.Repeat("x", i+1) + "\n"))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		}
	}))
	defer srv.Close()
	bounded := &http.Client{Transport: &provider.Transport{HeaderTimeout: 100 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}}
	if _, err := bounded.Get(srv.URL + "/mute"); !errors.Is(err, model.ErrStalled) || !strings.Contains(err.Error(), "no response headers within 100ms") {
		t.Errorf("a server that never answers: %v, want ErrStalled naming the header bound", err)
	}
	res, err := bounded.Get(srv.URL + "/steady")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || strings.Count(string(b), "\n") != 10 {
		t.Errorf("a steady stream: %d lines, %v; want all 10, no error", strings.Count(string(b), "\n"), err)
	}
	res, err = (&http.Client{Transport: &provider.Transport{}}).Get(srv.URL + "/steady")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
}
