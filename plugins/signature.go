package plugins

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"aead.dev/minisign"
)

// Signatures: a tenant may require its modules to be signed by a key it
// trusts (RegistryOptions.Trust). A signature is minisign's
// (https://jedisct1.github.io/minisign/): a detached NAME.wasm.minisig
// beside NAME.wasm, as `minisign -Sm NAME.wasm` writes it, over the
// module's bytes (the sidecar manifest, the operator's description of a
// plain module, is not covered). Both of minisign's algorithms verify:
// the prehashed one (ED, minisign's default) and the legacy one (Ed,
// `minisign -S -l`). The check runs before anything is compiled: a module
// without a signature is refused with ErrUnsigned, one whose signature is
// malformed, by a key the tenant does not trust, or over other bytes, with
// ErrBadSignature; either way nothing changes.

// SignatureSuffix is what the name of a module's signature file adds to
// the module's: NAME.wasm.minisig.
const SignatureSuffix = ".minisig"

// MaxSignatureBytes bounds a signature file: minisign's are about 300
// bytes, with a trusted comment of a line.
const MaxSignatureBytes = 16 << 10

// Keyring is a set of trusted minisign public keys. The zero Keyring, or
// a nil one, trusts no key and requires nothing.
type Keyring struct {
	keys map[uint64]minisign.PublicKey
}

// ParseKeyring reads trusted public keys: each a minisign public key,
// either the base64 line of a minisign.pub file ("RWQ…") or the file's
// whole text (its untrusted comment line is skipped). Every bad key is
// reported at once.
func ParseKeyring(keys ...string) (*Keyring, error) {
	k := &Keyring{keys: map[uint64]minisign.PublicKey{}}
	var errs []error
	for i, text := range keys {
		var pk minisign.PublicKey
		if err := pk.UnmarshalText([]byte(strings.TrimSpace(text))); err != nil {
			errs = append(errs, fmt.Errorf("plugins: trusted key %d: %v (want a minisign public key, the second line of minisign.pub)", i+1, err))
			continue
		}
		k.keys[pk.ID()] = pk
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

// ReadKeyring reads trusted public keys from minisign.pub files (see
// [ParseKeyring]).
func ReadKeyring(paths ...string) (*Keyring, error) {
	texts := make([]string, 0, len(paths))
	var errs []error
	for _, p := range paths {
		b, err := readCapped(p, MaxSignatureBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("plugins: trusted key file %s: %v", p, err))
			continue
		}
		texts = append(texts, string(b))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ParseKeyring(texts...)
}

// With returns a Keyring that trusts the keys of k and of o.
func (k *Keyring) With(o *Keyring) *Keyring {
	out := &Keyring{keys: map[uint64]minisign.PublicKey{}}
	for _, r := range []*Keyring{k, o} {
		if r != nil {
			maps.Copy(out.keys, r.keys)
		}
	}
	return out
}

// Len returns how many keys k trusts; 0 for a nil Keyring.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// KeyIDs returns the ids of the keys k trusts, as minisign prints them
// (upper-case hexadecimal), sorted.
func (k *Keyring) KeyIDs() []string {
	if k == nil {
		return nil
	}
	out := make([]string, 0, len(k.keys))
	for id := range k.keys {
		out = append(out, keyID(id))
	}
	slices.Sort(out)
	return out
}

// Signer is who signed a module, as its signature says.
type Signer struct {
	// KeyID is the signing key's id, as minisign prints it (upper-case
	// hexadecimal, as in minisign.pub's comment).
	KeyID string `json:"key_id"`
	// TrustedComment is the signature's trusted comment (minisign -t):
	// signed with the module, so it is the signer's word.
	TrustedComment string `json:"trusted_comment"`
	// Algorithm is "ED" (prehashed, minisign's default) or "Ed" (legacy).
	Algorithm string `json:"algorithm"`
	// Verified tells that a trusted key verified the signature; false
	// for a signature only read (ReadSignature).
	Verified bool `json:"verified"`
}

// String says who signed, for logs and errors.
func (s Signer) String() string {
	return fmt.Sprintf("key %s (trusted comment %q)", s.KeyID, s.TrustedComment)
}

// ReadSignature reads a minisign signature without verifying it: who it
// says signed (Verified false). A malformed signature is ErrBadSignature.
func ReadSignature(sig []byte) (Signer, error) {
	s, _, err := parseSignature(sig)
	return s, err
}

// parseSignature reads a minisign signature.
func parseSignature(sig []byte) (Signer, minisign.Signature, error) {
	var s minisign.Signature
	if err := s.UnmarshalText(bytes.TrimSpace(sig)); err != nil {
		return Signer{}, s, fmt.Errorf("%w: it is not a minisign signature: %v", ErrBadSignature, strings.TrimPrefix(err.Error(), "minisign: "))
	}
	alg := "ED"
	if s.Algorithm == minisign.EdDSA {
		alg = "Ed"
	}
	return Signer{KeyID: keyID(s.KeyID), TrustedComment: s.TrustedComment, Algorithm: alg}, s, nil
}

// Verify checks sig, a minisign signature, over wasm with the keys k
// trusts, and returns who signed. A nil or empty sig is ErrUnsigned; a
// malformed one, one by a key k does not trust, or one over other bytes
// (or whose trusted comment was altered) is ErrBadSignature, its message
// saying which.
func (k *Keyring) Verify(wasm, sig []byte) (Signer, error) {
	if len(bytes.TrimSpace(sig)) == 0 {
		return Signer{}, fmt.Errorf("%w: the module has no signature; the tenant requires one by a trusted key (%s)", ErrUnsigned, strings.Join(k.KeyIDs(), ", "))
	}
	s, raw, err := parseSignature(sig)
	if err != nil {
		return Signer{}, err
	}
	pk, ok := k.lookup(raw.KeyID)
	if !ok {
		return Signer{}, fmt.Errorf("%w: signed by key %s, which the tenant does not trust (it trusts %s)", ErrBadSignature, s.KeyID, strings.Join(k.KeyIDs(), ", "))
	}
	if !minisign.Verify(pk, wasm, bytes.TrimSpace(sig)) {
		return Signer{}, fmt.Errorf("%w: the signature by key %s does not match the module's bytes (or its trusted comment was altered)", ErrBadSignature, s.KeyID)
	}
	s.Verified = true
	return s, nil
}

func (k *Keyring) lookup(id uint64) (minisign.PublicKey, bool) {
	if k == nil {
		return minisign.PublicKey{}, false
	}
	pk, ok := k.keys[id]
	return pk, ok
}

// keyID prints a key id as minisign does: upper-case hexadecimal, without
// leading zeros.
func keyID(id uint64) string { return strings.ToUpper(strconv.FormatUint(id, 16)) }

// readSignatureFile reads the signature beside a module's file
// (path+SignatureSuffix); nil when there is none.
func readSignatureFile(wasmPath string) ([]byte, error) {
	b, err := readCapped(wasmPath+SignatureSuffix, MaxSignatureBytes)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case errors.Is(err, errTooLarge):
		return nil, fmt.Errorf("%w: %s is over %d bytes: not read further", ErrBadSignature, wasmPath+SignatureSuffix, MaxSignatureBytes)
	}
	return b, err
}

// signerOf is who signed src: verified by a registry, else as its
// signature says; nil without a signature that reads.
func signerOf(src Source) *Signer {
	if src.signer != nil {
		s := *src.signer
		return &s
	}
	if len(src.Signature) == 0 {
		return nil
	}
	s, err := ReadSignature(src.Signature)
	if err != nil {
		return nil
	}
	return &s
}
