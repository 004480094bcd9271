package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoldenLedgers replays the checked-in ledgers: each decodes, its
// lines are exactly what Encode writes today (so the encoding of old
// ledgers never drifts unnoticed), and its transcript and replayed
// messages match the golden files (-update regenerates those, never the
// ledgers).
func TestGoldenLedgers(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "ledgers", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 5 {
		t.Fatalf("found %d ledgers in testdata/ledgers", len(paths))
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		t.Run(name, func(t *testing.T) {
			events, err := readLedger(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) == 0 {
				t.Fatal("empty ledger")
			}
			data, _ := os.ReadFile(path)
			var enc bytes.Buffer
			for _, e := range events {
				b, err := Encode(e)
				if err != nil {
					t.Fatalf("Encode(%s): %v", e.ID, err)
				}
				enc.Write(b)
				enc.WriteByte('\n')
			}
			if !bytes.Equal(enc.Bytes(), data) {
				t.Errorf("re-encoding %s does not give its bytes back:\n%s", path, enc.Bytes())
			}

			tr := WireTranscript(ProjectSession(name, events))
			checkUniqueIDs(t, tr.Items)
			golden(t, filepath.Join("testdata", "ledgers", name+".transcript.json"), marshalGolden(t, tr))

			msgs := ReplayMessages(events)
			checkConversation(t, msgs)
			golden(t, filepath.Join("testdata", "ledgers", name+".replay.json"), marshalGolden(t, msgs))
		})
	}
}

// TestBadLedgers: ledgers a build must refuse, clearly, naming the line.
func TestBadLedgers(t *testing.T) {
	tests := []struct {
		file string
		is   error
		msg  []string
	}{
		{"future_version.jsonl", ErrVersion, []string{":3:", `"ev-003"`, "(step)", "version 2", "newer than this build's 1"}},
		{"no_version.jsonl", ErrVersion, []string{":2:", `"ev-002"`, "missing"}},
		{"unknown_kind.jsonl", ErrInvalid, []string{":2:", `"ev-002"`, `unknown kind "hologram"`}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			events, err := readLedger(filepath.Join("testdata", "ledgers", "bad", tt.file))
			if err == nil {
				t.Fatalf("read %d events, want an error", len(events))
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("error %v: errors.Is(%v) = false", err, tt.is)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Errorf("error %v holds no *DecodeError", err)
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
	// Every bad ledger has a case.
	paths, _ := filepath.Glob(filepath.Join("testdata", "ledgers", "bad", "*.jsonl"))
	if len(paths) != len(tests) {
		t.Errorf("%d bad ledgers, %d cases", len(paths), len(tests))
	}
}
