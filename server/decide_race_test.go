package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestDecideAtOnce: decisions on one request at the same time, with its
// token and without, are each answered — one 200, the others 409 — and
// never dropped: a decision that lost the race after its checks passed
// reports the conflict the host returned.
func TestDecideAtOnce(t *testing.T) {
	for _, withToken := range []bool{true, false} {
		ts := newTestServer(t)
		if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
			t.Fatalf("upload: %d %s", code, body)
		}
		_, body := ts.do(t, ts.acme, "POST", "/v1/sessions/race/messages?wait=true", `{"text":"publish_post title=t body=b"}`)
		parked := decodeJSON[struct {
			Status    string
			Approvals []struct {
				ApprovalID string `json:"approval_id"`
				Token      string
			}
		}](t, body)
		if parked.Status != "approval_required" || len(parked.Approvals) != 1 {
			t.Fatalf("parked: %s", body)
		}
		a := parked.Approvals[0]
		decision := `{"approve":false,"reason":"no"}`
		if withToken {
			decision = `{"approve":false,"reason":"no","token":"` + a.Token + `"}`
		}
		const n = 8
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req, _ := newRequest(ts, ts.acme, "POST", "/v1/approvals/"+a.ApprovalID, decision)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("decision %d: %v", i, err)
					return
				}
				res.Body.Close()
				codes[i] = res.StatusCode
			})
		}
		wg.Wait()
		ok, conflicts := 0, 0
		for _, c := range codes {
			switch c {
			case 200:
				ok++
			case 409:
				conflicts++
			}
		}
		if ok != 1 || conflicts != n-1 {
			t.Errorf("token %v: answers %v, want one 200 and %d 409", withToken, codes, n-1)
		}
		ts.waitState(t, ts.acme, "race", "completed")
		if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/race/transcript", ""); strings.Count(body, `"approval":"denied"`) != 1 {
			t.Errorf("token %v: transcript %s", withToken, body)
		}
	}
}
