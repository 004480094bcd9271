package ledger

import (
	"encoding/json"
	"fmt"
)

// upgradeSteps holds, for each schema version v older than
// [SchemaVersion], the step that rewrites an event encoded in version v to
// version v+1 (in any form: [Upgrade] canonicalises the result). A version
// that changes the encoding adds the step from its predecessor here; a
// version without a step (there is none before 1) cannot be upgraded.
//
// Version 1 is the first: there is no step yet.
var upgradeSteps = map[int]func(data []byte) ([]byte, error){}

// Upgrade returns data, one encoded event of this build's [SchemaVersion]
// or an older one, as the current version's canonical encoding: what
// [Encode] writes for the event [Decode] reads. Upgrading its own result
// gives it back byte for byte, so a second pass over a ledger is a no-op.
// It is the rewrite a store's Rewrite (package storage) takes as it is.
//
// An event of a version newer than this build's, or of one without an
// upgrade step, fails with a *DecodeError matching [ErrVersion], and an
// event the current version refuses fails as Decode fails: data is then
// to be kept as it is, never dropped.
//
// Schema version 1 is the first and so far the only one. For it, Upgrade
// brings an event that is valid but not in canonical form — keys in
// another order, white space, a time with an offset, characters escaped
// differently, as an editor or another JSON tool may leave them — to the
// form Decode reads on its fast path.
func Upgrade(data []byte) ([]byte, error) {
	cur := data
	// An older version is stepped up to the current one; anything else
	// (the current version, a newer one, none, not an event) goes to
	// Decode as it is, which reads it or explains.
	var h header
	if json.Unmarshal(data, &h) == nil && h.V != nil {
		for v := *h.V; v < SchemaVersion; v++ {
			step := upgradeSteps[v]
			if step == nil {
				return nil, versionError(header{V: &v, ID: h.ID, Kind: h.Kind})
			}
			next, err := step(cur)
			if err != nil {
				return nil, &DecodeError{EventID: h.ID, Kind: h.Kind,
					Err: fmt.Errorf("%w: upgrading from version %d: %v", ErrInvalid, v, err)}
			}
			cur = next
		}
	}
	e, err := Decode(cur)
	if err != nil {
		return nil, err
	}
	return Encode(e)
}
