package server

import "testing"

// TestFeedDropsRatherThanWaits: a subscriber that does not keep up is
// marked as having missed changes (it resyncs) and never holds publish up;
// one that reads gets every change in order.
func TestFeedDropsRatherThanWaits(t *testing.T) {
	var f feed
	slow, fast := f.subscribe(), f.subscribe()
	for i := range feedBuffer * 3 {
		f.publish(feedChange{SessionID: "s", RunID: string(rune('a' + i%26))})
		if i < feedBuffer*2 {
			if c := <-fast.ch; c.RunID != string(rune('a'+i%26)) {
				t.Fatalf("fast: change %d is run %q, want %q: out of order", i, c.RunID, string(rune('a'+i%26)))
			}
		}
	}
	if len(slow.ch) != feedBuffer || len(slow.missed) != 1 {
		t.Errorf("slow: %d changes kept, missed %d; want %d and 1", len(slow.ch), len(slow.missed), feedBuffer)
	}
	if len(fast.ch) != feedBuffer || len(fast.missed) != 0 {
		t.Errorf("fast, then not reading for %d changes: %d changes, missed %d; want %[1]d and 0", feedBuffer, len(fast.ch), len(fast.missed))
	}
	f.unsubscribe(slow)
	f.unsubscribe(fast)
	f.publish(feedChange{SessionID: "s"}) // no subscriber: nothing to do
	if len(f.subs) != 0 {
		t.Errorf("%d subscribers left", len(f.subs))
	}
}
