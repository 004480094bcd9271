// Command http_steps is an example plugin: a tool that POSTs N numbered
// steps to a URL, one after the other, and returns their answers. It shows
// what a durable plugin call is: the host journals each request before it
// leaves and each answer before the plugin sees it, so a call its host
// stops mid-way (a crash, a deploy) is replayed on the resumed run with
// the journal answering the steps already done; only the request in
// flight at the crash is sent again, with the same Idempotency-Key.
//
// Input: {"url": "https://…", "steps": N}. Each step is a POST of
// {"step": i} (i from 1) with Content-Type application/json; the host sets
// its Idempotency-Key header. The URL's host must be one the tenant allows.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o http_steps.wasm .
package main

import (
	"encoding/json"
	"fmt"

	"github.com/agentichost/agentic/pdk"
)

type input struct {
	URL   string `json:"url"`
	Steps int    `json:"steps"`
}

type step struct {
	Step   int    `json:"step"`
	Status int    `json:"status"`
	Answer string `json:"answer"`
	// Key is the request's Idempotency-Key.
	Key string `json:"key"`
}

type result struct {
	Steps []step `json:"steps"`
}

const inputSchema = `{"type":"object","properties":{` +
	`"url":{"type":"string","minLength":1},` +
	`"steps":{"type":"integer","minimum":1,"maximum":1000}},` +
	`"required":["url","steps"],"additionalProperties":false}`

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "http_steps",
		Description: "POST the numbered steps 1..steps to url, in order, and return each answer.",
		InputSchema: inputSchema,
		Effect:      pdk.External,
	}, run)
	// The same steps, none of which may reach the server twice: a step in
	// flight when the host stopped is not sent again, and the call ends
	// "outcome unknown" naming it.
	pdk.RegisterTool(pdk.Tool{
		Name:        "http_steps_once",
		Description: "POST the numbered steps 1..steps to url, in order, each at most once, and return each answer.",
		InputSchema: inputSchema,
		Effect:      pdk.External,
		AtMostOnce:  true,
	}, run)
}

func run(_ pdk.Call, in input) (result, error) {
	out := result{Steps: []step{}}
	for i := 1; i <= in.Steps; i++ {
		body, _ := json.Marshal(map[string]int{"step": i})
		key := pdk.IdempotencyKey()
		res, err := pdk.Fetch(pdk.HTTPRequest{
			Method:  "POST",
			URL:     in.URL,
			Headers: map[string]string{"Content-Type": "application/json"},
			Body:    body,
		})
		if err != nil {
			return result{}, fmt.Errorf("step %d: %w", i, err)
		}
		if res.Status < 200 || res.Status > 299 {
			return result{}, fmt.Errorf("step %d: HTTP %d: %.200s", i, res.Status, res.Body)
		}
		out.Steps = append(out.Steps, step{Step: i, Status: res.Status, Answer: string(res.Body), Key: key})
	}
	return out, nil
}

func main() {}
