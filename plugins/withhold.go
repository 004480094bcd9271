package plugins

import (
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
)

// withholder finds the forms of a module's secrets in a text and replaces
// them with "[secret withheld]".
//
// What it looks for. Each secret's value, and the parts of it that are
// credentials themselves — what follows the scheme ("Bearer TOKEN",
// "Token …": TOKEN), basic credentials' base64, "user:password" and the
// password — each of at least minSecretForm bytes, in these forms:
//
//   - as it is;
//   - hex;
//   - base64, standard or URL-safe, padded or not, at any of the three
//     alignments it has inside a longer encoded text (base64 of
//     "Authorization: Bearer TOKEN" holds TOKEN's base64 at another
//     alignment than base64 of TOKEN does);
//
// each of them read through one layer of percent-encoding (a query's, a
// path's, every byte's), JSON's and C's escapes (\u0041, \x41, \", \/),
// HTML's character references (&#65;, &#x41;, &amp;), line breaks (base64
// cut in lines), without regard to case, with '-' and '+' and ' ' taken
// for one another and so '_' and '/' (URL-safe base64, a query's spaces).
//
// Pieces. Not only a whole form: every run of windowPlain bytes of a
// form as it is (windowHex of its hex, windowBase64 of its base64) is
// withheld too, wherever it stands, so that a host that hands the secret
// out in pieces (a slice of it per request) hands out none longer than
// that; a form no longer than its window is looked for whole.
//
// What it does not see: other encodings (base32, quoted-printable, two
// layers of percent-encoding, compression inside a body), a secret
// transformed (hashed, encrypted, reversed, cut into pieces shorter than
// a window), and the few bits of a secret a base64 form holds in its
// first and last character, which it shares with its neighbours. A text
// that shares a run of a window's length with a secret (two JWTs signed
// alike share their header) is withheld there too.
type withholder struct {
	sets []patternSet // by length, one per length
}

// The lengths of the runs withheld, and the shortest form looked for.
const (
	minSecretForm = 6
	windowPlain   = 12
	windowHex     = 2 * windowPlain
	windowBase64  = 4 * windowPlain / 3
)

// patternSet is the patterns of one length, found by a rolling hash.
type patternSet struct {
	n        int
	pow      uint64 // hashBase^(n-1)
	filter   *[1 << 10]uint64
	patterns map[string]struct{}
}

const hashBase = 1099511628211 // FNV's 64-bit prime

// bit is the filter's bit of a hash.
func bit(h uint64) (word int, mask uint64) {
	i := (h * 0x9e3779b97f4a7c15) >> 48 // 16 bits
	return int(i >> 6), 1 << (i & 63)
}

func (p *patternSet) add(s string) {
	if _, ok := p.patterns[s]; ok {
		return
	}
	p.patterns[s] = struct{}{}
	var h uint64
	for i := 0; i < len(s); i++ {
		h = h*hashBase + uint64(s[i])
	}
	w, m := bit(h)
	p.filter[w] |= m
}

// newWithholder returns the withholder of secrets; nil when there are
// none.
func newWithholder(secrets []EgressSecret) *withholder {
	sets := map[int]*patternSet{}
	add := func(form string, window int) {
		if len(form) <= window {
			window = len(form)
		}
		p := sets[window]
		if p == nil {
			p = &patternSet{n: window, filter: new([1 << 10]uint64), patterns: map[string]struct{}{}, pow: 1}
			for range window - 1 {
				p.pow *= hashBase
			}
			sets[window] = p
		}
		for i := 0; i+window <= len(form); i++ {
			p.add(form[i : i+window])
		}
	}
	for _, v := range secretTexts(secrets) {
		add(normalForm(v), windowPlain)
		add(hex.EncodeToString([]byte(v)), windowHex)
		for k := 0; k < 3; k++ {
			if core := base64Core(v, k); len(core) >= minSecretForm {
				add(normalForm(core), windowBase64)
			}
		}
	}
	if len(sets) == 0 {
		return nil
	}
	w := &withholder{}
	for _, p := range sets {
		w.sets = append(w.sets, *p)
	}
	slices.SortFunc(w.sets, func(a, b patternSet) int { return a.n - b.n })
	return w
}

// secretTexts are the texts of secrets looked for: each value, what
// follows its scheme, basic credentials' parts; those of at least
// minSecretForm bytes.
func secretTexts(secrets []EgressSecret) []string {
	var out []string
	add := func(s string) {
		if len(s) >= minSecretForm && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, s := range secrets {
		add(s.Value)
		scheme, rest, ok := strings.Cut(strings.TrimSpace(s.Value), " ")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		add(rest)
		if strings.EqualFold(scheme, "basic") {
			if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
				add(string(b))
				if _, pw, ok := strings.Cut(string(b), ":"); ok {
					add(pw)
				}
			}
		}
	}
	return out
}

// base64Core is the part of v's base64 that stands whatever precedes v in
// a longer text encoded at once, when k bytes (mod 3) precede it: the
// characters that hold bits of v alone.
func base64Core(v string, k int) string {
	e := base64.RawStdEncoding.EncodeToString(append(make([]byte, k), v...))
	from, to := (8*k+5)/6, 8*(k+len(v))/6
	if to <= from {
		return ""
	}
	return e[from:to]
}

// normalForm is s as a text's view reads it (see view).
func normalForm(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = normalByte(c)
	}
	return string(b)
}

// normalByte folds case, and takes '-' and ' ' for '+', '_' for '/'.
func normalByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '-' || c == ' ':
		return '+'
	case c == '_':
		return '/'
	}
	return c
}

// withhold returns s with every form of the secrets it holds replaced,
// and whether it held any (s itself when not).
func (w *withholder) withhold(s string) (string, bool) {
	if w == nil || len(s) < w.sets[0].n {
		return s, false
	}
	v := newView(s)
	var found [][2]int // runs of the view, [from, to)
	for i := range w.sets {
		found = w.sets[i].find(v.b, found)
	}
	if len(found) == 0 {
		return s, false
	}
	slices.SortFunc(found, func(a, b [2]int) int { return a[0] - b[0] })
	var out strings.Builder
	at := 0 // in s
	for i := 0; i < len(found); {
		from, to := found[i][0], found[i][1]
		for i++; i < len(found) && found[i][0] <= to; i++ {
			to = max(to, found[i][1])
		}
		start, end := int(v.from[from]), int(v.to[to-1])
		out.WriteString(s[at:start])
		out.WriteString(secretWithheld)
		at = end
	}
	out.WriteString(s[at:])
	return out.String(), true
}

// find appends the runs of b that are patterns of p, those that overlap
// merged (a text of the secret repeated is one run, not one per byte).
func (p *patternSet) find(b []byte, found [][2]int) [][2]int {
	n := p.n
	if len(b) < n {
		return found
	}
	base := len(found)
	var h uint64
	for i := 0; i < n; i++ {
		h = h*hashBase + uint64(b[i])
	}
	for i := 0; ; i++ {
		if w, m := bit(h); p.filter[w]&m != 0 {
			if _, ok := p.patterns[string(b[i:i+n])]; ok {
				if last := len(found) - 1; last >= base && found[last][1] >= i {
					found[last][1] = i + n
				} else {
					found = append(found, [2]int{i, i + n})
				}
			}
		}
		if i+n >= len(b) {
			return found
		}
		h = (h-uint64(b[i])*p.pow)*hashBase + uint64(b[i+n])
	}
}

// view is a text as the withholder reads it: one layer of escapes
// decoded, line breaks dropped, each byte folded (normalByte); from[i] and
// to[i] are where the text's bytes that make b[i] start and end.
type view struct {
	b        []byte
	from, to []int32 // (texts are bounded far below 2 GiB)
}

func newView(s string) view {
	v := view{b: make([]byte, 0, len(s)), from: make([]int32, 0, len(s)), to: make([]int32, 0, len(s))}
	for i := 0; i < len(s); {
		c, n, keep := unescape(s, i)
		if keep {
			v.b = append(v.b, normalByte(c))
			v.from = append(v.from, int32(i))
			v.to = append(v.to, int32(i+n))
		}
		i += n
	}
	return v
}

// unescape reads the byte s's escape at i stands for, and the escape's
// length; keep is false for what the view drops (line breaks, escaped
// or not).
func unescape(s string, i int) (c byte, n int, keep bool) {
	rest := s[i:]
	switch rest[0] {
	case '\r', '\n':
		return 0, 1, false
	case '%':
		if len(rest) >= 3 && isHex(rest[1]) && isHex(rest[2]) {
			return unhex(rest[1])<<4 | unhex(rest[2]), 3, true
		}
	case '\\':
		if len(rest) < 2 {
			break
		}
		switch rest[1] {
		case 'u', 'U':
			if len(rest) >= 6 && isHex(rest[2]) && isHex(rest[3]) && isHex(rest[4]) && isHex(rest[5]) &&
				rest[2] == '0' && rest[3] == '0' && unhex(rest[4]) < 8 {
				return unhex(rest[4])<<4 | unhex(rest[5]), 6, true
			}
		case 'x', 'X':
			if len(rest) >= 4 && isHex(rest[2]) && isHex(rest[3]) {
				return unhex(rest[2])<<4 | unhex(rest[3]), 4, true
			}
		case '"', '\\', '/', '\'':
			return rest[1], 2, true
		case 'n', 'r':
			return 0, 2, false
		}
	case '&':
		if c, n, ok := charRef(rest); ok {
			return c, n, true
		}
	}
	return rest[0], 1, true
}

// charRef reads an HTML character reference of an ASCII character at the
// start of s: &#65; &#x41; or one of the few names.
func charRef(s string) (byte, int, bool) {
	end := strings.IndexByte(s, ';')
	if end < 3 || end > 10 {
		return 0, 0, false
	}
	ref := strings.ToLower(s[1:end])
	if c, ok := namedRefs[ref]; ok {
		return c, end + 1, true
	}
	if ref[0] != '#' {
		return 0, 0, false
	}
	digits, base := ref[1:], 10
	if strings.HasPrefix(digits, "x") {
		digits, base = digits[1:], 16
	}
	if digits == "" {
		return 0, 0, false
	}
	v := 0
	for i := 0; i < len(digits); i++ {
		d := digits[i]
		switch {
		case '0' <= d && d <= '9':
			v = v*base + int(d-'0')
		case base == 16 && 'a' <= d && d <= 'f':
			v = v*base + int(d-'a'+10)
		default:
			return 0, 0, false
		}
	}
	if v >= 0x80 {
		return 0, 0, false
	}
	return byte(v), end + 1, true
}

// namedRefs are HTML's named character references of ASCII characters
// (HTML5's; '-' and '~' have none), names folded to lower case.
var namedRefs = map[string]byte{
	"amp": '&', "quot": '"', "lt": '<', "gt": '>', "apos": '\'', "excl": '!', "num": '#',
	"dollar": '$', "percnt": '%', "lpar": '(', "rpar": ')', "ast": '*', "midast": '*',
	"plus": '+', "comma": ',', "period": '.', "sol": '/', "colon": ':', "semi": ';',
	"equals": '=', "quest": '?', "commat": '@', "lsqb": '[', "lbrack": '[', "bsol": '\\',
	"rsqb": ']', "rbrack": ']', "hat": '^', "lowbar": '_', "underbar": '_', "grave": '`',
	"lcub": '{', "lbrace": '{', "verbar": '|', "vert": '|', "rcub": '}', "rbrace": '}',
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
