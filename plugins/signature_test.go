package plugins_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"aead.dev/minisign"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// signedRegistry is a registry whose tenant "acme" trusts what *keys
// holds (nil: no key, no signature required).
func signedRegistry(t *testing.T, keys *atomic.Pointer[plugins.Keyring], opts plugins.RegistryOptions) *plugins.Registry {
	t.Helper()
	rt, _ := newRuntime(t)
	opts.Trust = func(string) *plugins.Keyring { return keys.Load() }
	if opts.Limits == nil {
		opts.Limits = func(string) plugins.Limits { return plugins.Limits{CompileTimeout: 20 * time.Second} }
	}
	reg := plugins.NewRegistry(rt, opts)
	t.Cleanup(func() { reg.Close(context.Background()) })
	return reg
}

func trusting(t *testing.T, keys ...*plugintest.MinisignKey) *atomic.Pointer[plugins.Keyring] {
	t.Helper()
	var texts []string
	for _, k := range keys {
		texts = append(texts, k.PublicKey)
	}
	ring, err := plugins.ParseKeyring(texts...)
	if err != nil {
		t.Fatal(err)
	}
	var p atomic.Pointer[plugins.Keyring]
	p.Store(ring)
	return &p
}

// TestSignatures: a tenant that trusts keys loads a module only with a
// minisign signature by one of them, made by the minisign tool (its
// prehashed default and its legacy algorithm alike), and says who signed;
// an unsigned module, one signed by a key it does not trust, a signature
// of other bytes, a truncated or altered one, are refused before anything
// compiles (a compile bomb among them is refused at once), each with its
// reason, and the version serving keeps serving.
func TestSignatures(t *testing.T) {
	trusted, stranger := plugintest.NewMinisignKey(t), plugintest.NewMinisignKey(t)
	a, b := versionWasm(t, "A"), versionWasm(t, "B")
	bomb := nestedBlocks(100_000)
	good := trusted.Sign(t, a, "-t", "release 1.2.0 of v")
	altered := bytes.Replace(good, []byte("release 1.2.0"), []byte("release 9.9.9"), 1)
	cases := []struct {
		name     string
		wasm     []byte
		sig      []byte
		want     error  // nil: loads
		says     string // in the error, or the signer's trusted comment
		alg      string
		serveVer string
	}{
		{name: "signed", wasm: a, sig: good, says: "release 1.2.0 of v", alg: "ED"},
		{name: "legacy algorithm", wasm: a, sig: trusted.Sign(t, a, "-l"), alg: "Ed"},
		{name: "unsigned", wasm: b, want: plugins.ErrUnsigned, says: "requires one by a trusted key (" + trusted.ID + ")"},
		{name: "untrusted key", wasm: b, sig: stranger.Sign(t, b), want: plugins.ErrBadSignature, says: "key " + stranger.ID + ", which the tenant does not trust"},
		{name: "signature of other bytes", wasm: b, sig: good, want: plugins.ErrBadSignature, says: "does not match the module's bytes"},
		{name: "truncated signature", wasm: a, sig: good[:len(good)/2], want: plugins.ErrBadSignature, says: "not a minisign signature"},
		{name: "trusted comment altered", wasm: a, sig: altered, want: plugins.ErrBadSignature, says: "does not match"},
		{name: "not a signature", wasm: a, sig: []byte("hello\n"), want: plugins.ErrBadSignature, says: "not a minisign signature"},
		{name: "unsigned compile bomb", wasm: bomb, want: plugins.ErrUnsigned},
		{name: "compile bomb, signed by a stranger", wasm: bomb, sig: stranger.Sign(t, bomb), want: plugins.ErrBadSignature},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := signedRegistry(t, trusting(t, trusted), plugins.RegistryOptions{})
			// A version serves first: signed C.
			c := versionWasm(t, "C")
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: c, Signature: trusted.Sign(t, c)}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			m, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: tc.wasm, Signature: tc.sig})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				s := m.Signer()
				if s == nil || !s.Verified || s.KeyID != trusted.ID || s.Algorithm != tc.alg || !strings.Contains(s.TrustedComment, tc.says) {
					t.Fatalf("signer %+v, want %s's, verified, %s, %q", s, trusted.ID, tc.alg, tc.says)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want %v saying %q", err, tc.want, tc.says)
			}
			if pe, ok := errors.AsType[*plugins.PluginError](err); !ok || pe.Export != "verify" {
				t.Errorf("err %#v, want a *PluginError of verify", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the refusal took %s: was it compiled first?", d)
			}
			if m, _ := reg.Module("acme", "v"); m == nil || m.Hash() != hashOf(c) {
				t.Errorf("the version serving changed")
			}
			if rf := reg.Refusals("acme"); len(rf) != 1 || !errors.Is(rf[0].Err, tc.want) {
				t.Errorf("refusals %+v", rf)
			}
		})
	}

	t.Run("no keys, no requirement", func(t *testing.T) {
		var none atomic.Pointer[plugins.Keyring]
		reg := signedRegistry(t, &none, plugins.RegistryOptions{})
		m, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: a, Signature: stranger.Sign(t, a, "-t", "who")})
		if err != nil {
			t.Fatal(err)
		}
		if s := m.Signer(); s == nil || s.Verified || s.KeyID != stranger.ID || s.TrustedComment != "who" {
			t.Errorf("signer %+v, want the stranger's, not verified", s)
		}
		if m, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: b}); err != nil || m.Signer() != nil {
			t.Errorf("an unsigned module: %v, signer %v", err, m.Signer())
		}
	})
}

// TestSignaturesDirectory: in a watched directory, NAME.wasm.minisig
// signs NAME.wasm: a signed module loads, an unsigned one is refused and
// listed, and loads once its signature is written; a module replaced by
// bytes its signature does not cover is refused while the version serving
// goes on.
func TestSignaturesDirectory(t *testing.T) {
	key := plugintest.NewMinisignKey(t)
	reg := signedRegistry(t, trusting(t, key), plugins.RegistryOptions{})
	dir := t.TempDir()
	a, b := versionWasm(t, "A"), versionWasm(t, "B")
	write := func(name string, data []byte) {
		t.Helper()
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("signed.wasm", a)
	write("signed.wasm.minisig", key.Sign(t, a, "-t", "ci build 7"))
	write("unsigned.wasm", b)
	w, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, ok := reg.Module("acme", "signed")
	if !ok || m.Signer() == nil || m.Signer().TrustedComment != "ci build 7" || !m.Signer().Verified {
		t.Fatalf("the signed module: %v %+v", ok, m)
	}
	// (A signature missing gets a Debounce more to come.)
	waitUntil(t, "the unsigned module to be refused", func() bool { return len(reg.Refusals("acme")) == 1 })
	if rf := reg.Refusals("acme"); len(rf) != 1 || rf[0].Name != "unsigned" || !errors.Is(rf[0].Err, plugins.ErrUnsigned) {
		t.Fatalf("refusals %+v, want unsigned's", rf)
	}
	write("unsigned.wasm.minisig", key.Sign(t, b))
	waitUntil(t, "the module to load once signed", func() bool { _, ok := reg.Module("acme", "unsigned"); return ok })
	if rf := reg.Refusals("acme"); len(rf) != 0 {
		t.Errorf("refusals %+v after the signature came", rf)
	}
	// New bytes beside the old signature: refused, the old version serves.
	write("signed.wasm", b)
	waitUntil(t, "the tampered module to be refused", func() bool { return len(reg.Refusals("acme")) == 1 })
	if rf := reg.Refusals("acme")[0]; !errors.Is(rf.Err, plugins.ErrBadSignature) {
		t.Errorf("refusal %+v", rf)
	}
	if m, _ := reg.Module("acme", "signed"); m == nil || m.Hash() != hashOf(a) {
		t.Error("the version serving changed")
	}
}

// TestSignaturesNotBypassed: neither a rollback nor the approval of a held
// version gets past the keys the tenant trusts now: a version kept from
// before signatures were required is refused on its rollback (the version
// serving goes on), and a held version signed by a key no longer trusted
// is refused on its approval and stays held.
func TestSignaturesNotBypassed(t *testing.T) {
	old, next := plugintest.NewMinisignKey(t), plugintest.NewMinisignKey(t)
	var none atomic.Pointer[plugins.Keyring]
	keys := &none
	reg := signedRegistry(t, keys, plugins.RegistryOptions{HoldWidening: true})
	ctx := context.Background()
	base := widenWasm(t)
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: base}); err != nil {
		t.Fatal(err)
	}
	keys.Store(trusting(t, old).Load())
	narrow := widenWasm(t, `VERSION="B"`, "NO_SECOND")
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: narrow, Signature: old.Sign(t, narrow)}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Rollback(ctx, "acme", "w", ""); !errors.Is(err, plugins.ErrUnsigned) {
		t.Fatalf("rolling back to a version never signed: %v, want ErrUnsigned", err)
	}
	if m, _ := reg.Module("acme", "w"); m.Hash() != hashOf(narrow) {
		t.Fatal("the version serving changed")
	}

	wide := widenWasm(t, `VERSION="C"`, "EXTRA")
	_, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: wide, Signature: old.Sign(t, wide)})
	if !errors.Is(err, plugins.ErrHeld) {
		t.Fatalf("a widening version: %v, want held", err)
	}
	held := reg.Held("acme")[0]
	keys.Store(trusting(t, next).Load()) // the old key is retired
	if _, err := reg.ApproveHeld(ctx, "acme", "w", held.Hash); !errors.Is(err, plugins.ErrBadSignature) || !strings.Contains(err.Error(), old.ID) {
		t.Fatalf("approving a version signed by a retired key: %v", err)
	}
	if h := reg.Held("acme"); len(h) != 1 || h[0].Hash != held.Hash {
		t.Errorf("held %+v, want it held still", h)
	}
	keys.Store(trusting(t, old, next).Load())
	if _, err := reg.ApproveHeld(ctx, "acme", "w", held.Hash); err != nil {
		t.Fatalf("approving with its key trusted again: %v", err)
	}
}

// TestParseKeyring: a key is minisign.pub's second line or the whole file;
// anything else is an error naming the key.
func TestParseKeyring(t *testing.T) {
	key := plugintest.NewMinisignKey(t)
	file, err := os.ReadFile(key.PublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys []string
		want string // "" : ok
	}{
		{"the base64 line", []string{key.PublicKey}, ""},
		{"the file's text", []string{string(file)}, ""},
		{"not base64", []string{"RWQ not a key"}, "trusted key 1"},
		{"a signature, not a key", []string{"RUQ" + key.PublicKey[3:]}, "trusted key 1"},
		{"second bad", []string{key.PublicKey, "xx"}, "trusted key 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring, err := plugins.ParseKeyring(tc.keys...)
			switch {
			case tc.want == "" && (err != nil || ring.Len() != 1 || ring.KeyIDs()[0] != key.ID):
				t.Errorf("%v %v, want key %s", err, ring.KeyIDs(), key.ID)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
	ring, err := plugins.ReadKeyring(key.PublicKeyFile)
	if err != nil || ring.Len() != 1 {
		t.Errorf("ReadKeyring: %v", err)
	}
	// An id with a leading zero prints as minisign prints it: without.
	raw := append([]byte("Ed"), 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01)
	raw = append(raw, make([]byte, 32)...)
	ring, err = plugins.ParseKeyring(base64.StdEncoding.EncodeToString(raw))
	if err != nil || ring.KeyIDs()[0] != "123456789ABCDEF" {
		t.Errorf("key id %v %v, want 123456789ABCDEF", ring.KeyIDs(), err)
	}
}

// FuzzVerify: whatever the signature's text, Verify neither panics nor
// verifies anything but the signed bytes by the trusted key.
func FuzzVerify(f *testing.F) {
	pub, priv, err := minisign.GenerateKey(bytes.NewReader(make([]byte, 64)))
	if err != nil {
		f.Fatal(err)
	}
	ring, err := plugins.ParseKeyring(pub.String())
	if err != nil {
		f.Fatal(err)
	}
	msg := []byte("\x00asm\x01\x00\x00\x00")
	sig := minisign.SignWithComments(priv, msg, "trusted", "untrusted")
	f.Add(msg, sig)
	f.Add(msg, sig[:len(sig)/2])
	f.Add([]byte("other"), sig)
	f.Add(msg, []byte("untrusted comment: x\nRUQ=\ntrusted comment: y\nzz"))
	f.Fuzz(func(t *testing.T, wasm, s []byte) {
		signer, err := ring.Verify(wasm, s)
		if err == nil && (!bytes.Equal(wasm, msg) || !signer.Verified) {
			t.Fatalf("verified %q with %q", wasm, s)
		}
		if err != nil && !errors.Is(err, plugins.ErrBadSignature) && !errors.Is(err, plugins.ErrUnsigned) {
			t.Fatalf("err %v is neither sentinel", err)
		}
		_, _ = plugins.ReadSignature(s)
	})
}
