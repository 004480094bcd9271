package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/memory"
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

// TestEventStreamSnapshotPage: a session's event stream with ?limit=N
// sends snapshots of the transcript's last N items, with what lies before
// them (page.has_earlier: the transcript API's before=FIRST pages back);
// without it, the whole transcript and no page, as before. The
// snapshot's transcript is the transcript API's: no raw provider
// payloads. A bad limit, and the transcript API's after and before, are
// refused 400.
func TestEventStreamSnapshotPage(t *testing.T) {
	store := memory.New()
	ts := startServer(t, serverSetup{Store: store})
	for _, text := range []string{"one", "two", "three"} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"`+text+`"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	type snapshot struct {
		Transcript struct {
			Items []struct{ ID, Text string }
		}
		Page *struct {
			HasEarlier bool `json:"has_earlier"`
			HasLater   bool `json:"has_later"`
		}
	}
	first := func(session, query string) (snapshot, string) {
		t.Helper()
		req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/"+session+"/events"+query, "")
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		e, ok := newSSEReader(res.Body).next()
		if !ok || e.Name != "snapshot" {
			t.Fatalf("%s%s: the first event %+v", session, query, e)
		}
		return decodeJSON[snapshot](t, e.Data), e.Data
	}
	type transcript struct {
		Items []struct{ ID string }
		Page  struct {
			HasEarlier bool `json:"has_earlier"`
		}
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s/transcript", "")
	whole := decodeJSON[snapshot](t, `{"transcript":`+body+`}`)
	if len(whole.Transcript.Items) != 6 {
		t.Fatalf("the transcript: %s", body)
	}

	snap, data := first("s", "?limit=2")
	if len(snap.Transcript.Items) != 2 || snap.Transcript.Items[0].ID != whole.Transcript.Items[4].ID || snap.Transcript.Items[1].ID != whole.Transcript.Items[5].ID {
		t.Errorf("?limit=2: %s, want the last two items", data)
	}
	if snap.Page == nil || !snap.Page.HasEarlier || snap.Page.HasLater {
		t.Errorf("?limit=2: page %+v, want earlier items and no later ones", snap.Page)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/s/transcript?limit=4&before="+snap.Transcript.Items[0].ID, "")
	if back := decodeJSON[transcript](t, body); len(back.Items) != 4 || back.Items[0].ID != whole.Transcript.Items[0].ID || back.Page.HasEarlier {
		t.Errorf("the page before the snapshot's: %s", body)
	}
	if snap, data := first("s", "?limit=10"); len(snap.Transcript.Items) != 6 || snap.Page == nil || snap.Page.HasEarlier {
		t.Errorf("?limit=10: %s, want the six items and nothing earlier", data)
	}
	if snap, data := first("s", ""); len(snap.Transcript.Items) != 6 || snap.Page != nil {
		t.Errorf("no limit: %s, want the whole transcript and no page", data)
	}

	// A session whose passes kept the provider's raw payloads.
	for _, e := range hosttest.Load(t, store, "acme:s") {
		if e.Step != nil {
			st := *e.Step
			st.Raw = json.RawMessage(`{"provider_detail":"kept for replay"}`)
			e.Step = &st
		}
		if err := store.Append(context.Background(), "acme:kept", e); err != nil {
			t.Fatal(err)
		}
	}
	if _, data := first("kept", ""); strings.Contains(data, "provider_detail") || strings.Contains(data, `"raw":`) {
		t.Errorf("the snapshot holds the raw payloads: %s", data)
	}

	for _, query := range []string{"?limit=0", "?limit=1001", "?limit=x", "?after=msg_x", "?before=msg_x&limit=2"} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s/events"+query, ""); code != 400 || !strings.Contains(body, `"invalid`) {
			t.Errorf("%s: %d %s, want 400", query, code, body)
		}
	}
}
