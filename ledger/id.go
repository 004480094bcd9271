package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

// crockford is the Crockford base32 alphabet: sortable, no I, L, O or U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID mints a unique id: prefix and an underscore (when prefix is not
// empty), then 26 characters of
// Crockford base32 holding the current time in milliseconds (48 bits) and
// 80 random bits, so that ids minted later sort later (to the millisecond).
// Ids are minted once, before the event that carries them is appended.
func NewID(prefix string) string {
	return newID(prefix, time.Now())
}

func newID(prefix string, t time.Time) string {
	var raw [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(raw[:8], ms<<16)
	rand.Read(raw[6:]) // never fails (crypto/rand)
	// 128 bits as 26 base32 digits, most significant first (the first
	// digit holds the top 3 bits).
	hi := binary.BigEndian.Uint64(raw[:8])
	lo := binary.BigEndian.Uint64(raw[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	var b strings.Builder // the prefix and the digits, in one allocation
	b.Grow(len(prefix) + 1 + len(out))
	if prefix != "" {
		b.WriteString(prefix)
		b.WriteByte('_')
	}
	b.Write(out[:])
	return b.String()
}
