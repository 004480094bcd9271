// Command publish_post is an example plugin: a tool with an external effect
// that publishes a post by an HTTP POST to the tenant's publishing
// endpoint, through the host (which allows only the tenant's hosts).
//
// It is idempotent by call id: the call id is sent as the Idempotency-Key
// header, and the result is kept in the tenant's key-value store under the
// call id, so a call the host re-runs after a crash returns the first
// result without publishing twice.
//
// Configuration (set by the host for the tenant): "endpoint", the URL to
// POST to, e.g. https://blog.example.com/api/posts.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o publish_post.wasm .
package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentichost/agentic/pdk"
)

type input struct {
	Title string   `json:"title"`
	Body  string   `json:"body"`
	Tags  []string `json:"tags,omitempty"`
}

type result struct {
	Status string `json:"status"`
	PostID string `json:"post_id"`
	URL    string `json:"url,omitempty"`
	// Replayed is true when the result comes from an earlier run of the
	// same call (nothing was published again).
	Replayed bool `json:"replayed,omitempty"`
}

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "publish_post",
		Description: "Publish a blog post (title and markdown body). This publishes to the public site: use it only when asked to publish.",
		InputSchema: `{"type":"object","properties":{` +
			`"title":{"type":"string","minLength":1,"maxLength":200},` +
			`"body":{"type":"string","minLength":1},` +
			`"tags":{"type":"array","items":{"type":"string"},"maxItems":10}},` +
			`"required":["title","body"],"additionalProperties":false}`,
		Effect:     pdk.External,
		Idempotent: true,
	}, publish)
}

func publish(c pdk.Call, in input) (result, error) {
	if c.ID == "" {
		return result{}, errors.New("publish_post needs a call id (its idempotency key)")
	}
	key := "publish_post/" + c.ID
	if prev, ok, err := pdk.KVGet(key); err != nil {
		return result{}, fmt.Errorf("reading the idempotency record: %w", err)
	} else if ok {
		var r result
		if err := json.Unmarshal(prev, &r); err == nil {
			r.Replayed = true
			pdk.Logf(pdk.LogInfo, "publish_post %s: already published as %s", c.ID, r.PostID)
			return r, nil
		}
	}
	endpoint, ok := pdk.Config("endpoint")
	if !ok || endpoint == "" {
		return result{}, errors.New(`publish_post is not configured: the host sets "endpoint" for the tenant`)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return result{}, err
	}
	res, err := pdk.Fetch(pdk.HTTPRequest{
		Method: "POST",
		URL:    endpoint,
		Headers: map[string]string{
			"Content-Type":    "application/json",
			"Idempotency-Key": c.ID,
		},
		Body: body,
	})
	if err != nil {
		return result{}, err
	}
	if res.Status < 200 || res.Status > 299 {
		return result{}, fmt.Errorf("publishing failed: HTTP %d: %.200s", res.Status, res.Body)
	}
	var created struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}
	if err := json.Unmarshal(res.Body, &created); err != nil || created.ID == "" {
		return result{}, fmt.Errorf("publishing: unexpected answer (HTTP %d): %.200s", res.Status, res.Body)
	}
	r := result{Status: "published", PostID: created.ID, URL: created.URL}
	record, _ := json.Marshal(r)
	if err := pdk.KVSet(key, record); err != nil {
		// Published, but a re-run would publish again: say so.
		pdk.Logf(pdk.LogWarn, "publish_post %s: published as %s but not recorded: %v", c.ID, r.PostID, err)
	}
	pdk.Logf(pdk.LogInfo, "publish_post %s: published as %s", c.ID, r.PostID)
	return r, nil
}

func main() {}
