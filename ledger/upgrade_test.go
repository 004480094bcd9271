package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpgradeCanonical: every event of the golden ledgers (written by
// Encode) is already current and canonical; Upgrade leaves it byte for
// byte.
func TestUpgradeCanonical(t *testing.T) {
	files, err := filepath.Glob("testdata/ledgers/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden ledgers: %v", err)
	}
	n := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			out, err := Upgrade(line)
			if err != nil || !bytes.Equal(out, line) {
				t.Fatalf("%s: Upgrade(%s) = %s, %v; want it unchanged", path, line, out, err)
			}
			n++
		}
	}
	t.Logf("%d canonical events left as they were", n)
}

// TestUpgradeNonCanonical: a valid version 1 event in another form comes
// out as Encode writes it, and a second Upgrade changes nothing.
func TestUpgradeNonCanonical(t *testing.T) {
	want := `{"v":1,"id":"e1","kind":"input","time":"2025-01-01T00:00:00Z","input":{"message_id":"m","parts":[{"type":"text","text":"a <b> & \u2028 c"}]}}`
	for name, in := range map[string]string{
		"keys reordered": `{"kind":"input","v":1,"time":"2025-01-01T00:00:00Z","id":"e1","input":{"parts":[{"text":"a <b> & \u2028 c","type":"text"}],"message_id":"m"}}`,
		"white space":    "{ \"v\": 1, \"id\": \"e1\", \"kind\": \"input\",\n \"time\": \"2025-01-01T00:00:00Z\", \"input\": {\"message_id\": \"m\", \"parts\": [{\"type\": \"text\", \"text\": \"a <b> & \\u2028 c\"}]}}",
		"an offset":      `{"v":1,"id":"e1","kind":"input","time":"2025-01-01T01:00:00+01:00","input":{"message_id":"m","parts":[{"type":"text","text":"a <b> & \u2028 c"}]}}`,
		"html escaped":   `{"v":1,"id":"e1","kind":"input","time":"2025-01-01T00:00:00Z","input":{"message_id":"m","parts":[{"type":"text","text":"a \u003cb\u003e \u0026 ` + "\u2028" + ` c"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Upgrade([]byte(in))
			if err != nil || string(out) == in || string(out) != want {
				t.Fatalf("Upgrade = %s, %v; want %s", out, err, want)
			}
			again, err := Upgrade(out)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("second Upgrade = %s, %v; want no change", again, err)
			}
		})
	}
}

// TestUpgradeRefuses: what Upgrade cannot bring to the current version is
// an error that says why, never a silent drop.
func TestUpgradeRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		in   string
		is   error
		text string
	}{
		"newer":     {`{"v":2,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}}`, ErrVersion, `event "e1" (poke): field "v": unsupported schema version 2, newer than this build's 1: upgrade agentic-host to read it`},
		"no step":   {`{"v":0,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}}`, ErrVersion, "no build reads it (the oldest version is 1)"},
		"missing v": {`{"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}}`, ErrVersion, `field "v"`},
		"invalid":   {`{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"},"extra":1}`, nil, `unknown field "extra"`},
		"not json":  {`{"v":1,`, nil, "unexpected EOF"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Upgrade([]byte(c.in))
			var de *DecodeError
			if err == nil || out != nil || !errors.As(err, &de) {
				t.Fatalf("Upgrade = %s, %v; want a *DecodeError", out, err)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q does not say %q", err, c.text)
			}
		})
	}
}

// TestUpgradeSteps runs the chain the way a later version will use it:
// with a step from a version 0 (registered here only), an event of that
// version comes out as version 1, canonical.
func TestUpgradeSteps(t *testing.T) {
	defer func(saved map[int]func([]byte) ([]byte, error)) { upgradeSteps = saved }(upgradeSteps)
	upgradeSteps = map[int]func([]byte) ([]byte, error){
		// "version 0" named the poke's text "body".
		0: func(data []byte) ([]byte, error) {
			data = bytes.Replace(data, []byte(`"v":0`), []byte(`"v":1`), 1)
			return bytes.Replace(data, []byte(`"body":`), []byte(`"text":`), 1), nil
		},
	}
	out, err := Upgrade([]byte(`{"v":0,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"body":"x"}}`))
	want := `{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r","poke":{"text":"x"}}`
	if err != nil || string(out) != want {
		t.Fatalf("Upgrade = %s, %v; want %s", out, err, want)
	}
	upgradeSteps[0] = func([]byte) ([]byte, error) { return nil, errors.New("broken step") }
	if _, err := Upgrade([]byte(`{"v":0,"id":"e1","kind":"poke"}`)); err == nil || !strings.Contains(err.Error(), "upgrading from version 0: broken step") {
		t.Fatalf("a failing step: %v", err)
	}
}
