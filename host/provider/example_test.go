package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

func ExampleClient_Stream() {
	// A stand-in for OpenRouter that replays a recorded stream.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(fixtures.Bytes("stream_text.sse"))
	}))
	defer srv.Close()

	c, err := provider.New(provider.Config{BaseURL: srv.URL + "/api/v1", APIKey: "sk-or-example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := model.Request{
		Model:    "openai/gpt-4o-mini",
		System:   "Be brief.",
		Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("Greet the world.")}}},
	}
	res, err := c.Stream(context.Background(), req, func(d model.Delta) {
		fmt.Printf("%s %q\n", d.Kind, d.Text)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Text)
	fmt.Println(res.FinishReason, res.Model, res.GenerationID)
	fmt.Printf("%d tokens, billed $%.6f\n", res.Usage.TotalTokens, res.Usage.Billed())
	// Output:
	// text "Hello"
	// text ", world"
	// text "!"
	// Hello, world!
	// stop openai/gpt-4o-mini gen-1767225600-Qx7TfakeStreamText01
	// 33 tokens, billed $0.000009
}

func ExampleClient_ContextWindow() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(fixtures.Bytes("models_list.json"))
	}))
	defer srv.Close()

	c, err := provider.New(provider.Config{BaseURL: srv.URL + "/api/v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := c.ContextWindow(context.Background(), "mistralai/mistral-7b-instruct")
	fmt.Println(n, err)
	// Output: 8192 <nil>
}

// ExampleParseUsage reads the usage of a call billed to the caller's own
// key through OpenRouter (BYOK): its billed cost is OpenRouter's fee plus
// the upstream provider's cost.
func ExampleParseUsage() {
	u := provider.ParseUsage(fixtures.Bytes("usage_byok.json"))
	fmt.Println(u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens, *u.IsBYOK)
	fmt.Printf("billed $%.5f\n", u.Billed())
	// Output:
	// 12000 800 8000 200 true
	// billed $0.02772
}

// ExampleTransport bounds a plain HTTP client's wait on a model endpoint
// that sends its headers, then falls silent.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then nothing
	}))
	defer srv.Close()
	client := &http.Client{Transport: &provider.Transport{HeaderTimeout: 5 * time.Second, IdleTimeout: 50 * time.Millisecond}}
	res, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	fmt.Println(errors.Is(err, model.ErrStalled), err)
	// Output:
	// true model: stream stalled: no data for 50ms
}
