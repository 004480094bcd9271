package plugins

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

const withholdToken = "tOk3n+Echo.Zq9x_Lp-72Wv~Mr"

// withholdForms are forms of s the withholder must find whole, by name.
func withholdForms(s string) map[string]string {
	b64 := base64.StdEncoding.EncodeToString([]byte("Authorization: Bearer " + s))
	var mime strings.Builder
	for i := 0; i < len(b64); i += 10 {
		mime.WriteString(b64[i:min(i+10, len(b64))] + "\r\n")
	}
	return map[string]string{
		"plain":             s,
		"upper":             strings.ToUpper(s),
		"query":             url.QueryEscape(s),
		"hex":               hex.EncodeToString([]byte(s)),
		"HEX":               strings.ToUpper(hex.EncodeToString([]byte(s))),
		"base64":            base64.StdEncoding.EncodeToString([]byte(s)),
		"base64 at 1":       base64.RawStdEncoding.EncodeToString([]byte("x" + s)),
		"base64url at 2":    base64.RawURLEncoding.EncodeToString([]byte("xy" + s)),
		"base64 in lines":   mime.String(),
		"base64 in JSON":    strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte("xx"+s)), "/", `\/`),
		"base64 in a query": url.QueryEscape(base64.StdEncoding.EncodeToString([]byte("x" + s))),
		"HTML names":        strings.NewReplacer("+", "&plus;", ".", "&period;", "_", "&LowBar;").Replace(s),
		"C escapes":         strings.NewReplacer("+", `\x2b`, ".", `\x2E`).Replace(s),
	}
}

// TestWithholder: each form of a secret is withheld wherever it stands in
// a text (a space before it may go with it: the value's own is one),
// a text without one is given back as it is (the same string),
// and a text of the secret repeated is withheld as one run, in memory
// proportional to the text, not to its matches.
func TestWithholder(t *testing.T) {
	w := newWithholder([]EgressSecret{{Host: "h", Header: "Authorization", Value: "Bearer " + withholdToken}})
	for name, form := range withholdForms(withholdToken) {
		out, found := w.withhold("before " + form + " after")
		if !found || !strings.Contains(out, secretWithheld) || !strings.HasPrefix(out, "before") || !strings.HasSuffix(out, " after") {
			t.Errorf("%s: %q", name, out)
		}
	}
	plain := "nothing of it here: tOk3n, Echo, 72Wv"
	if out, found := w.withhold(plain); found || out != plain {
		t.Errorf("a text without the secret: %q %v", out, found)
	}
	out, _ := w.withhold(strings.Repeat(withholdToken, 4096))
	if out != secretWithheld {
		t.Errorf("the secret repeated: %.200q", out)
	}
	if newWithholder(nil) != nil || newWithholder([]EgressSecret{{Value: "short"}}) != nil {
		t.Error("a withholder of nothing to look for")
	}
}

// FuzzWithhold: whatever surrounds a form of the secret, the withholder
// leaves none of it, and never fails on a text.
func FuzzWithhold(f *testing.F) {
	f.Add("", "", uint8(0))
	f.Add("%", "%4", uint8(3))
	f.Add(`\u00`, "&#x", uint8(5))
	f.Add("tOk3n+Ech", "o.Zq9x", uint8(1))
	f.Add("&plus;&", ";\\", uint8(7))
	w := newWithholder([]EgressSecret{{Host: "h", Header: "Authorization", Value: "Bearer " + withholdToken}})
	names := []string{"plain", "upper", "query", "hex", "HEX", "base64", "base64 at 1", "base64url at 2"}
	forms := withholdForms(withholdToken)
	f.Fuzz(func(t *testing.T, before, after string, which uint8) {
		name := names[int(which)%len(names)]
		out, _ := w.withhold(before + forms[name] + after)
		low := strings.ToLower(out)
		for _, n := range names {
			if f := strings.ToLower(forms[n]); len(f) >= 16 && strings.Contains(low, f[2:len(f)-2]) {
				t.Fatalf("%s of the secret, put as %s between %q and %q: %q", n, name, before, after, out)
			}
		}
		_, _ = w.withhold(before + after) // never fails
	})
}

// BenchmarkWithhold: a MiB of text without the secret, as a call's
// answer or output is checked.
func BenchmarkWithhold(b *testing.B) {
	w := newWithholder([]EgressSecret{{Host: "h", Header: "Authorization", Value: "Bearer " + withholdToken}})
	text := strings.Repeat(fmt.Sprintf("%q, ", "abcdefghijklmnopqrstuvwxyz0123456789+/"), (1<<20)/44)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		w.withhold(text)
	}
}
