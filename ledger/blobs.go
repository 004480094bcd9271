package ledger

import (
	"slices"
	"strings"
)

// validDigest tells whether d is a blob digest: "sha256:" and 64
// lower-case hex digits (the form storage.BlobDigest makes).
func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// BlobRefs returns the digests of every blob the event refers to: its
// input parts' [Part.Blob] and its tool result's [ToolResult.OutputBlob],
// in the event's order, repeats included.
func (e *Event) BlobRefs() []string {
	var refs []string
	if in := e.Input; in != nil {
		for i := range in.Parts {
			if b := in.Parts[i].Blob; b != "" {
				refs = append(refs, b)
			}
		}
	}
	if r := e.ToolResult; r != nil && r.OutputBlob != "" {
		refs = append(refs, r.OutputBlob)
	}
	return refs
}

// BlobRefs returns the digest of every blob the events refer to (see
// [Event.BlobRefs]), sorted and each once; nil when they refer to none.
// A sweep of unreferenced blobs, an export and a deletion of sessions
// take what a session keeps by reference from it.
func BlobRefs(events []Event) []string {
	var refs []string
	for i := range events {
		refs = append(refs, events[i].BlobRefs()...)
	}
	if refs == nil {
		return nil
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}
