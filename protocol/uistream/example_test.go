package uistream_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/protocol/uistream"
)

// A deterministic UI message stream for a UI's own tests: a run recorded
// from a real host with a scripted model (hosttest.RecordStream: stable
// ids, virtual times), converted into the chunks the AI SDK's useChat
// receives, each at the virtual time of the update that produced it. A
// test serves them (or plays them on a hosttest.Clock) without timing.
func ExampleConverter_fixture() {
	s, err := hosttest.RecordStream(context.Background(), hosttest.StreamSpec{
		Message: "hi",
		Replies: []hosttest.Reply{{Text: "Hello there."}},
	})
	if err != nil {
		panic(err)
	}
	at := "0s"
	conv := uistream.NewConverter(s.RunID, s.RunID, func(ch uistream.Chunk) error {
		b, _ := json.Marshal(ch)
		fmt.Println(at, string(b))
		return nil
	})
	for i, u := range s.Updates() {
		if i > 0 && i <= len(s.Events) {
			at = s.Events[i-1].At.String()
		}
		if done, err := conv.Update(u); err != nil || done {
			break
		}
	}
	// Output:
	// 0s {"type":"start","messageId":"run_1"}
	// 20ms {"type":"start-step"}
	// 40ms {"type":"text-start","id":"text-resp_1"}
	// 40ms {"type":"text-delta","id":"text-resp_1","delta":"Hello "}
	// 60ms {"type":"text-delta","id":"text-resp_1","delta":"there."}
	// 80ms {"type":"text-end","id":"text-resp_1"}
	// 80ms {"type":"finish-step"}
	// 80ms {"type":"finish","finishReason":"stop"}
}
