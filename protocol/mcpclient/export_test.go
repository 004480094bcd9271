package mcpclient

import "time"

// WithClock is s whose waits before a connection is made again, and
// before a listing, are read from now and after.
func WithClock(s Server, now func() time.Time, after func(time.Duration) <-chan time.Time) Server {
	s.now, s.after = now, after
	return s
}
