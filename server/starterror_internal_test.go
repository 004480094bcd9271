package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

// TestStartErrorOutOfFiles: a message refused because the process ran out
// of file descriptors (the storage could not open the session's file)
// answers 503 with Retry-After, a shortage to retry, not a 500.
func TestStartErrorOutOfFiles(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		w := httptest.NewRecorder()
		s.startError(w, fmt.Errorf("host: load session s: file: load session %q: open /d/s.jsonl: %w", "s", errno))
		var body apiError
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" ||
			body.Error.Code != codeUnavailable || !strings.Contains(body.Error.Message, "file descriptors") {
			t.Errorf("%v: %d Retry-After %q %+v; want 503, Retry-After, unavailable, a message naming the descriptors",
				errno, w.Code, w.Header().Get("Retry-After"), body.Error)
		}
	}
}
