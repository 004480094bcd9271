package server

import "time"

// SetKeyClock makes the server read the time of its keys' expiry from now,
// for the tests of package server_test that expire a key without waiting.
// Set it before the server serves.
func SetKeyClock(s *Server, now func() time.Time) { s.keys.now = now }
