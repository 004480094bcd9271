package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the header a delivery's signature travels in.
const SignatureHeader = "X-Agentic-Signature"

// DefaultTolerance is how far a signature's time may be from the
// receiver's clock before [Verify] refuses it: the window that bounds the
// replay of a delivery someone recorded.
const DefaultTolerance = 5 * time.Minute

// Sign returns the value of the [SignatureHeader] of body sent at t, by the
// convention Stripe's webhooks follow: "t=UNIX,v1=HEX", HEX the
// HMAC-SHA256 under secret of the decimal UNIX time, a '.', and the body
// as sent.
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery as its receiver should: header is the
// [SignatureHeader]'s value, body the request's body as received, now the
// receiver's clock. It accepts when one of the header's v1 signatures is
// body's under secret (a header may carry several while a secret is
// rotated) and its time is within tolerance of now (0: [DefaultTolerance]).
// It fails with an error wrapping [ErrSignature] or [ErrTimestamp].
func Verify(secret []byte, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=UNIX,v1=HEX, got %.80q", ErrSignature, header)
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: no v1 signature matches the body", ErrSignature)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now, past the tolerance of %s", ErrTimestamp, d.Round(time.Second), tolerance)
	}
	return nil
}
