package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/webhook"
)

// hanging is an endpoint that holds every request until released.
type hanging struct {
	srv     *httptest.Server
	entered chan struct{} // a value each time a request arrives
	release chan struct{}
	once    sync.Once
}

func newHanging(t *testing.T) *hanging {
	h := &hanging{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { h.free(); h.srv.Close() })
	return h
}

func (h *hanging) free() { h.once.Do(func() { close(h.release) }) }

// TestHangingEndpointDelaysNoOther: an endpoint that hangs holds back its
// own deliveries only. The tenant's other endpoint gets each event while
// the first still hangs on the first event (its attempt bounded by an
// hour here); once released, the hanging endpoint gets every event too,
// in order. The endpoints used to be sent to one after the other, so that
// each event waited for the hanging one's attempt to time out.
func TestHangingEndpointDelaysNoOther(t *testing.T) {
	store := memory.New()
	hang := newHanging(t)
	rcv := newReceiver(t)
	ob := newOutbox(t, store, hang.srv.URL, func(o *webhook.Options) {
		o.Endpoints = []webhook.Endpoint{{URL: hang.srv.URL}, {URL: rcv.srv.URL}}
		o.Timeout = time.Hour
	})
	run(t, ob)
	defer hang.free()
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob})
	sess := hs.Host.Session("s")
	ctx := context.Background()
	if _, err := sess.Send(ctx, "first", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	<-hang.entered // the hanging endpoint holds the first event
	rcv.waitFor(1, 20*time.Second)
	if _, err := sess.Send(ctx, "second", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	rcv.waitFor(2, 20*time.Second)
	select {
	case <-hang.entered:
		t.Fatal("the hanging endpoint got the second event while it held the first: its session's order is broken")
	default:
	}
	hang.free()
	list := waitDelivered(t, ob, 2)
	for _, d := range list {
		for _, tg := range d.Targets {
			if tg.State != webhook.StateDelivered || tg.Attempts != 1 {
				t.Errorf("delivery %s to %s: %s after %d attempts", d.ID, tg.URL, tg.State, tg.Attempts)
			}
		}
	}
}

// TestHangingEndpointFullDelaysNoOther: an endpoint that hangs on more
// sessions at once than it has places (Options.Concurrency) holds its
// places only: the tenant's other endpoint gets every event of every
// session while the first holds all its places and has more waiting.
func TestHangingEndpointFullDelaysNoOther(t *testing.T) {
	const sessions = 6
	store := memory.New()
	hang := newHanging(t)
	rcv := newReceiver(t)
	ob := newOutbox(t, store, hang.srv.URL, func(o *webhook.Options) {
		o.Endpoints = []webhook.Endpoint{{URL: hang.srv.URL}, {URL: rcv.srv.URL}}
		o.Timeout, o.Concurrency = time.Hour, 2
	})
	run(t, ob)
	defer hang.free()
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob})
	ctx := context.Background()
	for i := range sessions {
		if _, err := hs.Host.Session(string(rune('a'+i))).Send(ctx, "hello", host.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	<-hang.entered
	<-hang.entered // both of its places hang
	rcv.waitFor(sessions, 20*time.Second)
	select {
	case <-hang.entered:
		t.Fatal("the hanging endpoint got a third request with two places")
	default:
	}
	hang.free()
	waitDelivered(t, ob, sessions)
}
