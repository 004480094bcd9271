package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestPostEvent: a plugin call that waits for an event parks its run
// (status waiting, the wait named); POST /v1/sessions/{id}/events/{key}
// continues it, and the call returns the payload. Bad keys and payloads
// past the bound are refused, changing nothing.
func TestPostEvent(t *testing.T) {
	ts := startServer(t, serverSetup{})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/wait_event", plugintest.GoPlugin(t, "../examples/plugins/wait_event")); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/ev/messages?wait=true", `{"text":"please wait_event key=order-9"}`)
	res := decodeJSON[struct {
		Status string
		Waits  []struct{ CallID, Name, Event string }
	}](t, body)
	if code != 200 || res.Status != "waiting" || len(res.Waits) != 1 || res.Waits[0].Event != "order-9" || res.Waits[0].Name != "wait_event" {
		t.Fatalf("the message: %d %s, want status waiting for order-9", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/ev", ""); code != 200 || !strings.Contains(body, `"state":"waiting"`) || !strings.Contains(body, `"event":"order-9"`) {
		t.Fatalf("the session: %d %s, want waiting", code, body)
	}

	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/ev/events/bad%01key", "x"); code != 400 {
		t.Errorf("a key with a control character: %d %s, want 400", code, body)
	}
	if code, body := ts.doBytes(t, ts.acme, "POST", "/v1/sessions/ev/events/order-9", make([]byte, 1<<20+1)); code != 413 {
		t.Errorf("a payload past 1 MiB: %d %s, want 413", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/nobody/events/order-9", "x"); code != 404 {
		t.Errorf("a session that does not exist: %d %s, want 404", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/ev", ""); !strings.Contains(body, `"state":"waiting"`) {
		t.Fatalf("after the refusals the session is %d %s, want still waiting", code, body)
	}

	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/ev/events/order-9", `{"paid":true}`)
	if code != 202 || !strings.Contains(body, `"taken":true`) {
		t.Fatalf("the event: %d %s, want 202, taken", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/ev", "")
		if strings.Contains(body, `"state":"completed"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not complete: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/ev/transcript", ""); !strings.Contains(body, `\"payload\":\"{\\\"paid\\\":true}\"`) {
		t.Errorf("the transcript does not show the call returning the payload: %s", body)
	}
}
