package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// TestChatAttach: --attach sends files with the message — an image as an
// image part, a PDF as a file part with its name — which reach the model
// (the offline model says what it got) and the ledger byte for byte.
func TestChatAttach(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 255, 7}, 20)...)
	pdf := []byte("%PDF-1.4\n" + string([]byte{0xff, 0xfe, 0x00, 0x01}) + "\n%%EOF\n")
	for name, data := range map[string][]byte{"shot.png": png, "report.pdf": pdf} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	storeDir := t.TempDir()
	code, out, errOut := runBin(t, bin, "chat", "--offline", "--storage", "file:"+storeDir, "--session", "m",
		"--attach", filepath.Join(dir, "shot.png"), "--attach", filepath.Join(dir, "report.pdf"), "look at these")
	want := "You said: look at these [attached: image/png, 68 bytes; file report.pdf, application/pdf, 20 bytes]"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errOut, want)
	}
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	events, err := st.Load(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	var parts []ledger.Part
	for _, e := range events {
		if e.Input != nil {
			parts = e.Input.Parts
		}
	}
	if len(parts) != 3 || parts[1].Type != ledger.PartImage || !bytes.Equal(parts[1].Data, png) ||
		parts[2].Type != ledger.PartFile || parts[2].Name != "report.pdf" || parts[2].MIME != "application/pdf" || !bytes.Equal(parts[2].Data, pdf) {
		t.Errorf("the ledger's parts: %+v", parts)
	}
	if code, _, errOut := runBin(t, bin, "chat", "--offline", "--storage", "memory:", "--attach", filepath.Join(dir, "missing.png"), "hi"); code != 2 || !strings.Contains(errOut, "missing.png") {
		t.Errorf("a missing file: exit %d, %q", code, errOut)
	}
}
