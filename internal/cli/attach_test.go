package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
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

// TestChatAttachByReference: an attachment past --blob-threshold (64 KiB
// by default) is kept once in the storage's blobs/, however often it is
// sent, the ledger naming it; the model and the transcript get its bytes;
// --blob-quota refuses a message past it, appending nothing;
// --blob-threshold -1 keeps the bytes in the ledger.
func TestChatAttachByReference(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 255, 7, 9}, 25_000)...) // 100 008 bytes
	other := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3, 4}, 25_000)...)
	for name, data := range map[string][]byte{"big.png": png, "other.png": other} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	storeDir := t.TempDir()
	for _, text := range []string{"look", "again"} {
		code, out, errOut := runBin(t, bin, "chat", "--offline", "--storage", "file:"+storeDir, "--session", "m",
			"--attach", filepath.Join(dir, "big.png"), text)
		if want := "[attached: image/png, 100008 bytes]"; code != 0 || !strings.Contains(out, want) {
			t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errOut, want)
		}
	}
	blobs, err := os.ReadDir(filepath.Join(storeDir, "blobs"))
	if err != nil || len(blobs) != 1 {
		t.Fatalf("blobs/ holds %d files (%v), want the image once", len(blobs), err)
	}
	if data, _ := os.ReadFile(filepath.Join(storeDir, "blobs", blobs[0].Name())); !bytes.Equal(data, png) {
		t.Error("the blob is not the image")
	}
	code, out, errOut := runBin(t, bin, "chat", "--offline", "--storage", "file:"+storeDir, "--session", "m", "--blob-quota", "150000",
		"--attach", filepath.Join(dir, "other.png"), "and this")
	if code == 0 || !strings.Contains(errOut, "blob quota of 150000 bytes") {
		t.Errorf("past --blob-quota: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := st.Load(context.Background(), "m")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	inputs := 0
	for _, e := range events {
		if e.Input != nil {
			inputs++
			if p := e.Input.Parts[1]; p.Blob != "sha256:"+blobs[0].Name() || len(p.Data) != 0 || p.Size != int64(len(png)) {
				t.Errorf("the ledger's part: %s, %d bytes inline, size %d", p.Blob, len(p.Data), p.Size)
			}
		}
	}
	if inputs != 2 {
		t.Errorf("%d inputs, want 2: the refused message appends nothing", inputs)
	}
	code, out, errOut = runBin(t, bin, "transcript", "--storage", "file:"+storeDir, "m")
	if code != 0 || !strings.Contains(out, base64.StdEncoding.EncodeToString(png)) {
		t.Errorf("the transcript does not carry the image: exit %d, stderr %q", code, errOut)
	}

	inline := t.TempDir()
	if code, _, errOut := runBin(t, bin, "chat", "--offline", "--storage", "file:"+inline, "--blob-threshold", "-1",
		"--attach", filepath.Join(dir, "big.png"), "look"); code != 0 {
		t.Fatalf("--blob-threshold -1: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(inline, "blobs")); err == nil {
		t.Error("--blob-threshold -1 made blobs/")
	}
}

// TestChatAttachOnRedis: on Redis, and on a Redis Cluster, an attachment
// sent twice is one blob, and the transcript carries it back.
func TestChatAttachOnRedis(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{5, 6, 7, 8}, 20_000)...)
	path := filepath.Join(dir, "big.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{"redis": redistest.Start(t, redistest.Options{}).URL()}
	if !testing.Short() {
		urls["cluster"] = "redis+cluster://" + strings.Join(redistest.StartCluster(t, 3).Addrs(), ",")
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			for _, text := range []string{"look", "again"} {
				if code, out, errOut := runBin(t, bin, "chat", "--offline", "--storage", url, "--session", "r", "--attach", path, text); code != 0 ||
					!strings.Contains(out, "[attached: image/png, 80008 bytes]") {
					t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
				}
			}
			st, err := redis.Open(context.Background(), url, redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			infos, err := st.ListBlobs(context.Background())
			if err != nil || len(infos) != 1 || infos[0].Digest != storage.BlobDigest(png) {
				t.Errorf("the store's blobs: %+v, %v; want the image once", infos, err)
			}
			if code, out, errOut := runBin(t, bin, "transcript", "--storage", url, "r"); code != 0 || !strings.Contains(out, base64.StdEncoding.EncodeToString(png)) {
				t.Errorf("the transcript does not carry the image: exit %d, %q", code, errOut)
			}
		})
	}
}

// TestTaskAttach: task --attach sends files with the task's prompt
// (TaskSpec.Parts): the task ends submitted, its deliverable validated, and
// the prompt's message holds the image byte for byte.
func TestTaskAttach(t *testing.T) {
	bin := needBinary(t)
	dir, storeDir := t.TempDir(), t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3}, 20)...)
	schema := filepath.Join(dir, "title.json")
	for name, data := range map[string][]byte{"shot.png": png, "title.json": []byte(`{"type":"object","properties":{"title":{"type":"string","minLength":3}},"required":["title"]}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runBin(t, bin, "task", "--offline", "--storage", "file:"+storeDir, "--session", "pic", "--schema", schema,
		"--prompt", "submit_deliverable title=Pictured", "--attach", filepath.Join(dir, "shot.png"))
	if code != 0 || !strings.Contains(out, `"status": "submitted"`) || !strings.Contains(out, `"title": "Pictured"`) {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	events, err := st.Load(context.Background(), "pic")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Input == nil || len(events[0].Input.Parts) != 2 || events[0].Input.Parts[1].Type != ledger.PartImage ||
		events[0].Input.Parts[1].MIME != "image/png" || !bytes.Equal(events[0].Input.Parts[1].Data, png) {
		t.Fatalf("the task's prompt in the ledger: %+v", events[0].Input)
	}
	if code, _, errOut := runBin(t, bin, "task", "--offline", "--storage", "memory:", "--schema", schema, "--prompt", "hi",
		"--attach", filepath.Join(dir, "missing.png")); code != 2 || !strings.Contains(errOut, "missing.png") {
		t.Errorf("a missing file: exit %d, %q", code, errOut)
	}
}
