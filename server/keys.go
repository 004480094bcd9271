package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/storage"
)

// API keys: a key maps to a tenant. Keys are stored hashed — in the
// configuration (TenantConfig.Keys) or in the storage's key-value store,
// where `agentic-host keys create` puts them, so that every host sharing
// the storage knows them — and a key is shown once, when it is created.

// keysNamespace is the key-value namespace of the stored keys: by their
// hash, the record of each.
const keysNamespace = "agentic:keys"

// KeyRecord describes a stored API key (never the key itself).
type KeyRecord struct {
	// ID names the key; it is the key's first part, visible in it.
	ID string `json:"id"`
	// Tenant is the tenant the key opens.
	Tenant string `json:"tenant"`
	// Hash is "sha256:HEX" of the key.
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the key was revoked; zero while it is valid.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// ExpiresAt is when the key expires; zero when it never does. An
	// expired key is refused as a revoked one is.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// User is the end user the key is bound to: every request with it is
	// that user's, as if it named them in X-Agentic-User (a header naming
	// another user is refused). "" for a key of the whole tenant.
	User string `json:"user,omitempty"`
}

// Expired reports whether the key has expired at now.
func (r KeyRecord) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// KeyOptions tunes [CreateKey]. The zero value is usable.
type KeyOptions struct {
	// ExpiresAt is when the key expires: from then on it is refused
	// (401), and the event streams opened with it close at their next
	// heartbeat. Default: zero, never.
	ExpiresAt time.Time
	// User binds the key to an end user (see KeyRecord.User): 1 to 128
	// printable bytes, no space. Default: "", a key of the whole tenant.
	User string
}

// HashKey returns the "sha256:HEX" of an API key, as TenantConfig.Keys
// holds it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CreateKey makes a new API key for tenant, stores its hash in kv, and
// returns the key — the only time it is seen — with its record.
func CreateKey(ctx context.Context, kv storage.KV, tenant string, opts KeyOptions) (string, KeyRecord, error) {
	if !tenantName.MatchString(tenant) {
		return "", KeyRecord{}, fmt.Errorf("server: tenant %q: want 1 to 32 of [a-z0-9_-]", tenant)
	}
	if opts.User != "" && !validUser(opts.User) {
		return "", KeyRecord{}, fmt.Errorf("server: user %q: want 1 to %d bytes of printable characters without spaces", opts.User, maxUserBytes)
	}
	if !opts.ExpiresAt.IsZero() && !opts.ExpiresAt.After(time.Now()) {
		return "", KeyRecord{}, fmt.Errorf("server: the key would expire at %s, which is past", opts.ExpiresAt.UTC().Format(time.RFC3339))
	}
	var id [6]byte
	var secret [24]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", KeyRecord{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", KeyRecord{}, err
	}
	key := "ak_" + hex.EncodeToString(id[:]) + "_" + hex.EncodeToString(secret[:])
	rec := KeyRecord{ID: hex.EncodeToString(id[:]), Tenant: tenant, Hash: HashKey(key), CreatedAt: time.Now().UTC(), User: opts.User}
	if !opts.ExpiresAt.IsZero() {
		rec.ExpiresAt = opts.ExpiresAt.UTC()
	}
	b, _ := json.Marshal(rec)
	if err := kv.Set(ctx, keysNamespace, rec.Hash, b); err != nil {
		return "", KeyRecord{}, fmt.Errorf("server: store the key: %w", err)
	}
	return key, rec, nil
}

// ListKeys returns the records of the stored keys, by tenant and id.
func ListKeys(ctx context.Context, kv storage.KV) ([]KeyRecord, error) {
	hashes, err := kv.Keys(ctx, keysNamespace)
	if err != nil {
		return nil, fmt.Errorf("server: list the keys: %w", err)
	}
	var out []KeyRecord
	for _, h := range hashes {
		b, ok, err := kv.Get(ctx, keysNamespace, h)
		if err != nil {
			return nil, fmt.Errorf("server: list the keys: %w", err)
		}
		var rec KeyRecord
		if !ok || json.Unmarshal(b, &rec) != nil {
			continue
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b KeyRecord) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ErrNoSuchKey is returned by RevokeKey for an id no stored key has.
var ErrNoSuchKey = errors.New("server: no such key")

// RevokeKey revokes the stored key id: requests with it are refused from
// then on, and event streams opened with it close.
func RevokeKey(ctx context.Context, kv storage.KV, id string) (KeyRecord, error) {
	recs, err := ListKeys(ctx, kv)
	if err != nil {
		return KeyRecord{}, err
	}
	for _, rec := range recs {
		if rec.ID != id {
			continue
		}
		if rec.RevokedAt.IsZero() {
			rec.RevokedAt = time.Now().UTC()
		}
		b, _ := json.Marshal(rec)
		if err := kv.Set(ctx, keysNamespace, rec.Hash, b); err != nil {
			return KeyRecord{}, fmt.Errorf("server: revoke the key: %w", err)
		}
		return rec, nil
	}
	return KeyRecord{}, fmt.Errorf("%w: %s", ErrNoSuchKey, id)
}

// keyring finds the tenant of a presented key.
type keyring struct {
	kv     storage.KV
	config map[string]configKey // by hash, from the configuration
	now    func() time.Time
}

// configKey is a key of the configuration.
type configKey struct {
	tenant  string
	user    string    // the end user it is bound to; "" for none
	expires time.Time // zero: never
}

// keyOwner is whom a presented key opens the service to: a tenant and,
// for a key bound to one, an end user.
type keyOwner struct {
	tenant, user string
}

func newKeyring(kv storage.KV, tenants map[string]TenantConfig) *keyring {
	k := &keyring{kv: kv, config: map[string]configKey{}, now: time.Now}
	for name, t := range tenants {
		for _, c := range t.Keys {
			k.config[c.Hash] = configKey{tenant: name, user: c.User, expires: c.Expires}
		}
	}
	return k
}

// Why a presented key opens no tenant (see keyring.tenantOf).
const (
	keyUnknown = "unknown"
	keyRevoked = "revoked"
	keyExpired = "expired"
)

// tenantOf returns the tenant key opens, "" when none does (unknown,
// revoked, expired, or of a tenant the service does not serve), with why
// (keyRevoked, keyExpired, or keyUnknown for the others).
func (k *keyring) tenantOf(ctx context.Context, key string, serves func(string) bool) (tenant, why string, err error) {
	o, why, err := k.ownerOf(ctx, key, serves)
	return o.tenant, why, err
}

// ownerOf is tenantOf with the end user the key is bound to.
func (k *keyring) ownerOf(ctx context.Context, key string, serves func(string) bool) (owner keyOwner, why string, err error) {
	if key == "" {
		return keyOwner{}, keyUnknown, nil
	}
	h := HashKey(key)
	now := k.now()
	for hash, c := range k.config {
		if subtle.ConstantTimeCompare([]byte(hash), []byte(h)) == 1 {
			if !c.expires.IsZero() && !now.Before(c.expires) {
				return keyOwner{}, keyExpired, nil
			}
			return keyOwner{tenant: c.tenant, user: c.user}, "", nil
		}
	}
	b, ok, err := k.kv.Get(ctx, keysNamespace, h)
	if err != nil || !ok {
		return keyOwner{}, keyUnknown, err
	}
	var rec KeyRecord
	switch {
	case json.Unmarshal(b, &rec) != nil || !serves(rec.Tenant):
		return keyOwner{}, keyUnknown, nil
	case !rec.RevokedAt.IsZero():
		return keyOwner{}, keyRevoked, nil
	case rec.Expired(now):
		return keyOwner{}, keyExpired, nil
	}
	return keyOwner{tenant: rec.Tenant, user: rec.User}, "", nil
}
