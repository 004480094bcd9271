//go:build unix

package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemos runs each of the README's demos (scripts/demo.sh) with the
// real binary, offline, and checks what each is there to show.
func TestDemos(t *testing.T) {
	bin := needBinary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"chaos", []string{"[retrying in", `"text": "You said: Through every fault, this exact sentence comes back once."`}},
		{"restart", []string{"[killed with SIGKILL mid-reply]", "[resuming an interrupted run]", "You said: Are you back?"}},
		{"compaction", []string{"Your secret code is ZEBRA42."}},
		{"queue", []string{`"status":"completed","text":"You said: and one more thing"`}},
		{"task", []string{`"status": "submitted"`}},
		{"approval", []string{"[exit 3]", "approved]", "blog: post 1 published"}},
		{"beforeafter", []string{"[retrying in", "(resumed) You said: And what does a lease add?", "You said: Thanks, that is all."}},
		{"media", []string{"[attached: image/png, 33 bytes; file notes.pdf, application/pdf, 33 bytes]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each demo its own directory, processes and ports
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "demo.sh"), c.name)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "BIN="+bin, "DEMO_DIR="+t.TempDir(), "OPENROUTER_API_KEY=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("demo %s: %v\n%s", c.name, err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("demo %s does not show %q:\n%s", c.name, w, out)
				}
			}
		})
	}
}
