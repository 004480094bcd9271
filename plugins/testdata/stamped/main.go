// Command stamped is a test plugin whose requests carry what a replay must
// read again: each step POSTs {"step": i, "at": the wall clock in
// nanoseconds, "nonce": 16 random bytes in hex} to the URL of its input.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentichost/agentic/pdk"
)

type input struct {
	URL   string `json:"url"`
	Steps int    `json:"steps"`
}

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "stamped",
		Description: "POST steps stamped with the time and a random nonce.",
		InputSchema: `{"type":"object","properties":{"url":{"type":"string"},"steps":{"type":"integer"}},"required":["url","steps"]}`,
		Effect:      pdk.External,
	}, func(_ pdk.Call, in input) ([]string, error) {
		var out []string
		for i := 1; i <= in.Steps; i++ {
			nonce := make([]byte, 16)
			if _, err := rand.Read(nonce); err != nil {
				return nil, err
			}
			body, _ := json.Marshal(map[string]any{"step": i, "at": time.Now().UnixNano(), "nonce": hex.EncodeToString(nonce)})
			res, err := pdk.Fetch(pdk.HTTPRequest{Method: "POST", URL: in.URL, Body: body})
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			out = append(out, string(body)+" -> "+string(res.Body))
		}
		return out, nil
	})
}

func main() {}
