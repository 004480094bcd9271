package plugins

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// An instance's clocks and random numbers, as WASI gives them to the
// guest: the host's own, except in a journaled call (journal.go), where
// what the guest read is journaled and a replay reads it again. A guest
// whose requests carry a timestamp or a random nonce then sends the same
// ones when it is replayed.
//
// They are streams of their own beside the host calls' entries, never
// checked for divergence: a replay answers a clock (or random) read with
// the next recorded value of its kind while there is one, then the host's
// own. A runtime that reads its clock more or less often when replayed (a
// fresh instance's collector) shifts which values it gets, which can only
// make a request differ — which the host calls' check catches. The
// monotonic clock never goes back: after a replay, the host's values are
// moved past the last one replayed.

// processStart is the origin of the monotonic clock.
var processStart = time.Now()

// sysSource is one instance's clocks and random numbers.
type sysSource struct {
	in *instance // set once the instance exists
}

// config adds the source's clocks and random numbers to mc.
func (s *sysSource) config(mc wazero.ModuleConfig) wazero.ModuleConfig {
	return mc.WithWalltime(s.walltime, sys.ClockResolution(time.Microsecond)).
		WithNanotime(s.nanotime, sys.ClockResolution(1)).
		WithRandSource(s)
}

// journal returns the journal of the call in progress, nil when there is
// none (or no call).
func (s *sysSource) journal() *journal {
	if s.in == nil || s.in.env == nil {
		return nil
	}
	return s.in.env.journal
}

func (s *sysSource) walltime() (int64, int32) {
	now := time.Now()
	j := s.journal()
	if j == nil {
		return now.Unix(), int32(now.Nanosecond())
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(now.UnixNano()))
	ns := int64(binary.BigEndian.Uint64(j.soft(ledger.JournalWalltime, b[:])))
	return ns / 1e9, int32(ns % 1e9)
}

func (s *sysSource) nanotime() int64 {
	now := int64(time.Since(processStart))
	j := s.journal()
	if j == nil {
		return now
	}
	return j.monotonic(now)
}

// Read is the guest's random source.
func (s *sysSource) Read(p []byte) (int, error) {
	if _, err := io.ReadFull(rand.Reader, p); err != nil {
		return 0, err
	}
	if j := s.journal(); j != nil {
		copy(p, j.soft(ledger.JournalRandom, p))
	}
	return len(p), nil
}

// soft returns what the guest reads of the stream op (walltime, nanotime,
// random): the next recorded bytes while the journal has them, else live,
// which it journals (with the next write that must be durable).
func (j *journal) soft(op string, live []byte) []byte {
	q := j.softQ[op]
	n := min(len(q), len(live))
	out := live
	if n > 0 {
		out = make([]byte, len(live))
		copy(out, q[:n])
		copy(out[n:], live[n:])
		j.softQ[op] = q[n:]
	}
	if n < len(live) {
		j.recordSoft(op, live[n:])
	}
	return out
}

// monotonic is soft for the monotonic clock: after a replay, the host's
// own readings are moved past the last replayed one.
func (j *journal) monotonic(now int64) int64 {
	var b [8]byte
	if len(j.softQ[ledger.JournalNanotime]) >= 8 {
		v := int64(binary.BigEndian.Uint64(j.soft(ledger.JournalNanotime, b[:])))
		j.monoLast = v
		return v
	}
	if v := now + j.monoShift; v <= j.monoLast {
		j.monoShift += j.monoLast - v + 1
	}
	v := now + j.monoShift
	binary.BigEndian.PutUint64(b[:], uint64(v))
	j.recordSoft(ledger.JournalNanotime, b[:])
	j.monoLast = v
	return v
}

// maxJournalStreams bounds what one call journals of its clocks and
// random numbers together. Past it the readings are not journaled: a
// replay reads the recorded ones, then the host's own. A guest spinning
// on its clock cannot so fill the ledger (a reading is 8 bytes, a tight
// loop makes millions).
const maxJournalStreams = 64 << 10

// recordSoft journals bytes of a stream, within maxJournalStreams:
// appended to the last pending entry when it is of the same stream, so
// that a guest reading its clock a thousand times in a row takes one
// entry.
func (j *journal) recordSoft(op string, b []byte) {
	if j.streamBytes+len(b) > maxJournalStreams {
		return
	}
	j.streamBytes += len(b)
	if n := len(j.pending); n > 0 && j.pending[n-1].Op == op {
		j.pending[n-1].Answer = append(j.pending[n-1].Answer, b...)
		j.bytes += len(b)
		j.pendingN += len(b)
		return
	}
	j.record(context.Background(), ledger.JournalEntry{Op: op, Answer: append([]byte(nil), b...)}, false)
}

// softOps are the streams of a journal that are not host calls.
var softOps = map[string]bool{ledger.JournalWalltime: true, ledger.JournalNanotime: true, ledger.JournalRandom: true}
