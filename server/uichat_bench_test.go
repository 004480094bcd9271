package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkUIChat is one chat through the UI route, over HTTP, on memory
// storage: the POST, the run against an in-process model that streams 22
// words a word a delta, and the UI message stream read to its [DONE]. It
// measures what serve's own code spends on a chat (make load measures the
// process, with a model server and file storage, beside the AI SDK's
// route).
func BenchmarkUIChat(b *testing.B) {
	ts := startServer(b, serverSetup{})
	words := make([]string, 20)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", i)
	}
	text := strings.Join(words, " ")
	// The model's default reply echoes: "You said: " and the text.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	i := 0
	chat := func() {
		i++
		req, err := http.NewRequest("POST", ts.URL+"/v1/ui/chat", strings.NewReader(uiBody(fmt.Sprintf("b%d", i), text)))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+ts.acme)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("status %d", res.StatusCode)
		}
		sc := bufio.NewScanner(res.Body)
		done := false
		for sc.Scan() {
			if sc.Text() == "data: [DONE]" {
				done = true
			}
		}
		if !done {
			b.Fatal("the stream ended without [DONE]")
		}
	}
	chat() // warm up
	b.ReportAllocs()
	for b.Loop() {
		chat()
	}
}
