package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// TestCloseRefusesDecisionsAndLeavesWaits: while the server shuts down
// (Close), an approval decision is refused with 503 and decides nothing
// (the request stays pending for another host), and a ?wait=true request
// whose run is stopped by the shutdown gets 503: the run is left,
// interrupted, for another host.
func TestCloseRefusesDecisionsAndLeavesWaits(t *testing.T) {
	ts := startServer(t, serverSetup{}) // the plugin compiled once, in the tests' cache
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/parked/messages?wait=true", `{"text":"publish_post title=t body=b"}`); code != 200 || !strings.Contains(body, "approval_required") {
		t.Fatalf("park: %d %s", code, body)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/approvals", "")
	pending := decodeJSON[struct {
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
		}
	}](t, body)
	if len(pending.Approvals) != 1 {
		t.Fatalf("approvals: %s", body)
	}
	id := pending.Approvals[0].ApprovalID

	stallModel(ts.model)
	type answer struct {
		code int
		body string
	}
	waited := make(chan answer, 1)
	go func() {
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/stalled/messages?wait=true", `{"text":"stall"}`)
		waited <- answer{code, body}
	}()
	ts.waitState(t, ts.acme, "stalled", "running")

	closed := make(chan error, 1)
	go func() {
		// The stalled pass never ends: Close stops it, as a crash would,
		// when its grace ends.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		closed <- ts.srv.Close(ctx)
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if code, _ := ts.do(t, ts.acme, "GET", "/readyz", ""); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never said 503")
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+id, `{"approve":true}`); code != 503 {
		t.Errorf("a decision while the server closes: %d %s, want 503", code, body)
	}
	<-closed
	if w := <-waited; w.code != 503 || !strings.Contains(w.body, "left for another host") {
		t.Errorf("the ?wait=true request of the run the shutdown stopped: %d %s, want 503, the run left for another host", w.code, w.body)
	}
	events, err := ts.store.Load(context.Background(), "acme:parked")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ledger.Approvals(events, "") {
		if a.State != ledger.ApprovalPending {
			t.Errorf("the refused decision decided: %+v", a)
		}
	}
}
