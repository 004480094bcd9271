package server

import (
	"fmt"
	"testing"
)

// TestUsersBounded: a flood of distinct end-user names whose buckets never
// refill (a rate all but zero) keeps the tracked users under
// maxUsersTracked, and a user with an admission in progress keeps its
// places through the sweeps.
func TestUsersBounded(t *testing.T) {
	var us users
	cfg := PerUserConfig{RequestsPerSecond: 1e-9, Burst: 1}
	busy := us.slotsOf("busy")
	busy.mu.Lock()
	busy.sessions = map[string]int{"s": 1} // an admission in progress
	busy.mu.Unlock()
	for i := range 5 * maxUsersTracked {
		if !us.limiter(fmt.Sprint("flood-", i), cfg).Allow() {
			t.Fatalf("user %d's first request refused", i)
		}
		us.slotsOf(fmt.Sprint("flood-", i))
		if n := len(us.limiters) + len(us.slots); n > maxUsersTracked {
			t.Fatalf("after %d users, %d tracked: past the bound of %d", i+1, n, maxUsersTracked)
		}
	}
	if us.slots["busy"] != busy {
		t.Error("the sweeps forgot a user with an admission in progress")
	}
}
