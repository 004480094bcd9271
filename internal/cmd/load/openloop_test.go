package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoop: the open-loop load sends every chat it planned, spread
// over the tenants by weight and alternating between the two routes; a
// UI stream's text is checked against the message; statsOf counts each
// tenant's chats, refusals (429) and failures apart, and its percentiles
// are of the accepted chats only.
func TestOpenLoop(t *testing.T) {
	var posts, uis atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/sessions/"):
			posts.Add(1)
			if key == "k-busy" {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		case r.Method == "POST" && r.URL.Path == "/v1/ui/chat":
			uis.Add(1)
			var body struct {
				Messages []struct {
					Parts []struct{ Text string }
				}
			}
			json.NewDecoder(r.Body).Decode(&body)
			text := body.Messages[0].Parts[0].Text
			if key == "k-busy" {
				// A wrong answer is a failure, not a refusal.
				text = "something else"
			}
			w.Header().Set("Content-Type", "text/event-stream")
			d, _ := json.Marshal(map[string]string{"type": "text-delta", "id": "t", "delta": "You said: " + text})
			fmt.Fprintf(w, "data: {\"type\":\"start\"}\n\ndata: %s\n\ndata: {\"type\":\"finish\"}\n\ndata: [DONE]\n\n", d)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	keys := map[string]string{"calm": "k-calm", "busy": "k-busy"}
	arrivals := openLoop(newClient(8), []string{srv.URL}, "t", 400, 100*time.Millisecond, "hello", keys, map[string]float64{"calm": 3, "busy": 1}, nil)
	if len(arrivals) != 40 || posts.Load() != 20 || uis.Load() != 20 {
		t.Fatalf("%d arrivals, %d posts, %d UI chats; want 40, 20, 20", len(arrivals), posts.Load(), uis.Load())
	}
	all, calm, busy := statsOf(arrivals, ""), statsOf(arrivals, "calm"), statsOf(arrivals, "busy")
	if calm.n != 30 || busy.n != 10 || all.n != 40 {
		t.Fatalf("chats: calm %d, busy %d, all %d; want 30, 10, 40", calm.n, busy.n, all.n)
	}
	if calm.refused != 0 || calm.failed != 0 || calm.p99 <= 0 || calm.sseBytes <= 0 {
		t.Errorf("calm: %+v", calm)
	}
	if busy.refused != 5 || busy.failed != 5 || busy.firstErr == nil || !strings.Contains(busy.firstErr.Error(), "something else") || busy.p99 != 0 {
		t.Errorf("busy: %+v, want 5 refused (posts), 5 failed (UI: a wrong text), no accepted latency", busy)
	}
	if all.refused != 5 || all.failed != 5 {
		t.Errorf("all: %+v", all)
	}

	// A raw tenant sends POSTs only, over the connections its pool keeps.
	posts.Store(0)
	uis.Store(0)
	rp := newRawPool(srv.URL)
	defer rp.close()
	arrivals = openLoop(newClient(8), []string{srv.URL}, "r", 400, 100*time.Millisecond, "hello", keys, map[string]float64{"calm": 3, "busy": 1}, map[string]*rawPool{"busy": rp})
	if busy := statsOf(arrivals, "busy"); busy.n != 10 || busy.refused != 10 || busy.failed != 0 {
		t.Errorf("busy sent raw: %+v, want 10 POSTs refused", busy)
	}
	if posts.Load() != 25 || uis.Load() != 15 {
		t.Errorf("%d posts, %d UI chats; want 25, 15", posts.Load(), uis.Load())
	}
	if len(rp.idle) == 0 {
		t.Error("the raw pool kept no connection")
	}
}

// TestPercentile: the p-th of the sorted durations, the last for p = 1,
// and 0 for none; the input is left as it was.
func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for p, want := range map[float64]time.Duration{0: 1, 0.5: 3, 0.99: 5, 1: 5} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(%v) = %v, want %v", p, got, want)
		}
	}
	if ds[0] != 5 || percentile(nil, 0.5) != 0 {
		t.Errorf("the input sorted, or none not 0: %v", ds)
	}
}

// TestSearchCapacity: against a p99 of a tenth of a millisecond a chat a
// second (100 ms at 1,000), the search goes up from rates under the limit,
// or down from a rate past it, by 1.4×, and finds 1,000 between the two
// rates around it; a p99 never past the limit gives 0, and a failed
// measurement stops the search.
func TestSearchCapacity(t *testing.T) {
	for _, c := range []struct {
		rates, want []float64
	}{
		{[]float64{200, 500}, []float64{200, 500, 700, 970, 1350}}, // 700×1.4 is 979.99…
		{[]float64{3000}, []float64{3000, 2140, 1520, 1080, 770}},
	} {
		var got []float64
		capacity, err := searchCapacity(c.rates, 100*time.Millisecond, func(rate float64) (time.Duration, error) {
			got = append(got, rate)
			return time.Duration(rate * float64(time.Millisecond) / 10), nil
		})
		if err != nil || capacity < 999 || capacity > 1001 || !slices.Equal(got, c.want) {
			t.Errorf("from %v: capacity %.1f (%v), measured at %v; want 1000, measured at %v", c.rates, capacity, err, got, c.want)
		}
	}
	n := 0
	capacity, err := searchCapacity([]float64{200}, 100*time.Millisecond, func(float64) (time.Duration, error) {
		n++
		return time.Millisecond, nil
	})
	if capacity != 0 || err != nil || n > 20 {
		t.Errorf("never past the limit: capacity %v (%v) after %d rates; want 0", capacity, err, n)
	}
	boom := errors.New("boom")
	if _, err := searchCapacity([]float64{200}, 100*time.Millisecond, func(rate float64) (time.Duration, error) {
		if rate > 300 {
			return 0, boom
		}
		return time.Millisecond, nil
	}); !errors.Is(err, boom) {
		t.Errorf("a failed measurement: %v, want it returned", err)
	}
}
