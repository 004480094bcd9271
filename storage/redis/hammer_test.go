package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// TestHammerClose starts and ends watches, appends and loads from many
// goroutines while the Store is closed: nothing panics or races, every call
// after Close fails with ErrClosed, and Close waits for the watches.
func TestHammerClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for round := range 3 {
		st, err := redis.Open(t.Context(), srv.URL(), redis.Options{Prefix: freshPrefix(), WatchBlock: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 8 {
			wg.Go(func() {
				id := "h" + itoa(g)
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithCancel(t.Context())
					ch, err := st.Watch(ctx, id)
					if err == nil && n%2 == 0 {
						cancel()
						for range ch { // closed promptly
						}
					}
					err2 := st.Append(t.Context(), id, poke(id, n))
					_, err3 := st.Load(t.Context(), id)
					cancel()
					for _, e := range []error{err, err2, err3} {
						if e != nil && !errors.Is(e, storage.ErrClosed) {
							t.Errorf("round %d: %v", round, e)
							return
						}
					}
				}
			})
		}
		time.Sleep(100 * time.Millisecond)
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(stop)
		wg.Wait()
		if err := st.Append(t.Context(), "h0", poke("h0", 0)); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("Append after Close = %v, want ErrClosed", err)
		}
	}
}
