package file_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/storagetest"
)

// FuzzFileRecovery appends batches, damages the end of the file as a crash
// could (a cut anywhere, then arbitrary bytes), and checks recovery: Load
// never fails when the damage is confined to the tail, returns exactly the
// batches that end before the cut (so never an event that was not
// appended, and never part of a batch), warns when it drops bytes, and a
// later Append is not glued to the garbage.
func FuzzFileRecovery(f *testing.F) {
	f.Add([]byte{0}, uint32(0), []byte(nil))
	f.Add([]byte{1, 3, 0, 2}, uint32(1<<31), []byte(nil))
	f.Add([]byte{3, 3}, uint32(700), []byte("garbage\n"))
	f.Add([]byte{2, 1, 3}, uint32(5000), []byte("\x00\x00\x00\x00"))
	f.Add([]byte{1}, uint32(10), []byte("\n\n"))
	f.Add([]byte{3, 2}, uint32(123456), []byte(`{"v":1,"id":"x"}`+"\n["))
	f.Add([]byte{1, 1, 1, 1}, uint32(999), []byte("]\n{\n"))
	f.Add([]byte{0, 0, 0}, uint32(1<<20), []byte(`[{"v":1}]`))

	pool := storagetest.EveryKind("run-fuzz")
	f.Fuzz(func(t *testing.T, sizes []byte, cut uint32, garbage []byte) {
		if len(sizes) == 0 {
			return
		}
		sizes = sizes[:min(len(sizes), 8)]
		var batches [][]ledger.Event
		n := 0
		for _, s := range sizes {
			batch := make([]ledger.Event, int(s%4)+1)
			for i := range batch {
				batch[i] = pool[n%len(pool)]
				batch[i].ID = fmt.Sprintf("%s#%d", batch[i].ID, n)
				n++
			}
			batches = append(batches, batch)
		}

		dir := t.TempDir()
		path := sessionPath(dir, "fz")
		st, _ := openStore(t, dir, false)
		ends := []int{0} // ends[k]: the file's length after k batches
		for _, b := range batches {
			if err := st.Append(t.Context(), "fz", b...); err != nil {
				t.Fatalf("Append: %v", err)
			}
			ends = append(ends, ends[len(ends)-1]+len(record(t, b...)))
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		data := readFile(t, path)
		if len(data) != ends[len(ends)-1] {
			t.Fatalf("file has %d bytes, want %d", len(data), ends[len(ends)-1])
		}

		c := int(cut % uint32(len(data)+1))
		damaged := append(slices.Clone(data[:c]), garbage...)
		// The damage must be confined to the tail: no line from the one
		// the cut falls in onwards may be a valid record, or it would be
		// indistinguishable from an appended one.
		lineStart := bytes.LastIndexByte(data[:c], '\n') + 1
		for rest := damaged[lineStart:]; ; {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			if validRecord(rest[:i]) {
				t.Skip("the damage makes a valid record")
			}
			rest = rest[i+1:]
		}
		writeFile(t, path, damaged)

		k := 0 // batches that end before the cut
		for k+1 < len(ends) && ends[k+1] <= c {
			k++
		}
		want := concat(batches[:k]...)
		st, rec := openStore(t, dir, false)
		got, err := st.Load(t.Context(), "fz")
		if err != nil {
			t.Fatalf("Load of a file damaged at its tail (cut at %d of %d, %d bytes of garbage): %v", c, len(data), len(garbage), err)
		}
		if !equal(got, want) {
			t.Fatalf("Load returned %d events, want the %d of the first %d batches", len(got), len(want), k)
		}
		if torn, w := len(damaged) > ends[k], rec.warnings(); torn != (len(w) == 1) {
			t.Errorf("torn bytes: %v; warnings: %q", torn, w)
		}

		next := []ledger.Event{poke(1), poke(2)}
		if err := st.Append(t.Context(), "fz", next...); err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
		if got, want := readFile(t, path), append(slices.Clone(data[:ends[k]]), record(t, next...)...); !bytes.Equal(got, want) {
			t.Fatalf("file after Append:\n%q\nwant:\n%q", got, want)
		}
		st, rec = openStore(t, dir, false)
		got, err = st.Load(t.Context(), "fz")
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		if want := concat(want, next); !equal(got, want) {
			t.Fatalf("reload returned %d events, want %d", len(got), len(want))
		}
		if w := rec.warnings(); len(w) > 0 {
			t.Errorf("reload logged %q", w)
		}
	})
}

// validRecord tells whether line is a record per the file store's
// documented framing: one event, or a non-empty array of events.
func validRecord(line []byte) bool {
	if _, err := ledger.Decode(line); err == nil {
		return true
	}
	var raws []json.RawMessage
	if json.Unmarshal(line, &raws) != nil || len(raws) == 0 {
		return false
	}
	for _, r := range raws {
		if _, err := ledger.Decode(r); err != nil {
			return false
		}
	}
	return true
}
