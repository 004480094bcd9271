// Command wait_event is an example plugin: a tool that waits for an event
// named by its input — a webhook, another system's approval — and returns
// its payload; and one that waits a while.
//
// While it waits, the call holds nothing: no instance, no goroutine. The
// host journals the wait, ends the call there and parks the run (its
// status is "waiting"). When the event is posted to the session (POST
// /v1/sessions/{id}/events/{key}, `agentic-host event`, or
// Session.PostEvent), on any host sharing the storage, the call is
// replayed from its journal up to the wait, which now returns the payload.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wait_event.wasm .
package main

import (
	"time"

	"github.com/agentichost/agentic/pdk"
)

type eventInput struct {
	Key string `json:"key"`
}

type eventOutput struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

type sleepInput struct {
	Seconds int `json:"seconds"`
}

type sleepOutput struct {
	Slept int `json:"slept"`
}

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "wait_event",
		Description: "Wait for the event named key to be posted to this session, and return its payload.",
		InputSchema: `{"type":"object","properties":{"key":{"type":"string","minLength":1,"maxLength":256}},` +
			`"required":["key"],"additionalProperties":false}`,
		Effect: pdk.Read,
	}, func(_ pdk.Call, in eventInput) (eventOutput, error) {
		payload, err := pdk.WaitEvent(in.Key)
		if err != nil {
			return eventOutput{}, err
		}
		return eventOutput{Key: in.Key, Payload: string(payload)}, nil
	})
	pdk.RegisterTool(pdk.Tool{
		Name:        "wait_seconds",
		Description: "Wait the given number of seconds, then return.",
		InputSchema: `{"type":"object","properties":{"seconds":{"type":"integer","minimum":0,"maximum":86400}},` +
			`"required":["seconds"],"additionalProperties":false}`,
		Effect: pdk.Read,
	}, func(_ pdk.Call, in sleepInput) (sleepOutput, error) {
		if err := pdk.WaitFor(time.Duration(in.Seconds) * time.Second); err != nil {
			return sleepOutput{}, err
		}
		return sleepOutput{Slept: in.Seconds}, nil
	})
}

func main() {}
