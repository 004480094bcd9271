package host

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Approval tokens: a request's bearer credential, for deciding it from
// outside the host (a link in a message, a console) with
// [Session.DecideWithToken]. A token names its tenant, session and
// approval, and is bound by an HMAC-SHA256 under the host's
// Options.ApprovalSecret to exactly what was asked: the run, the call, the
// tool, the digest of its input, the policy's code and the expiry. The
// ledger holds no token; the host recomputes the MAC from the request it
// recorded, so a token fails when any of these changed.

// tokenClaims is a token's readable part.
type tokenClaims struct {
	V          int    `json:"v"`
	Tenant     string `json:"t,omitempty"`
	SessionID  string `json:"s"`
	ApprovalID string `json:"a"`
	Expires    int64  `json:"x,omitempty"` // Unix seconds
}

// approvalMAC is the HMAC of a request under secret.
func approvalMAC(secret []byte, tenant, sessionID, runID string, a ledger.ApprovalRequest) []byte {
	mac := hmac.New(sha256.New, secret)
	for _, f := range []string{"agentic-approval-v1", tenant, sessionID, runID, a.ApprovalID, a.CallID, a.Name,
		a.InputDigest, a.PolicySource, a.ExpiresAt.UTC().Format(time.RFC3339Nano)} {
		fmt.Fprintf(mac, "%d:%s;", len(f), f)
	}
	if a.Kind != "" {
		// A run's own request (a tool call's has no kind, and its MAC
		// stays as it was).
		fmt.Fprintf(mac, "kind:%d:%s;", len(a.Kind), a.Kind)
	}
	return mac.Sum(nil)
}

// mintToken returns the token of a request.
func mintToken(secret []byte, tenant, sessionID, runID string, a ledger.ApprovalRequest) string {
	c := tokenClaims{V: 1, Tenant: tenant, SessionID: sessionID, ApprovalID: a.ApprovalID}
	if !a.ExpiresAt.IsZero() {
		c.Expires = a.ExpiresAt.Unix()
	}
	claims, _ := json.Marshal(c)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(claims) + "." + enc.EncodeToString(approvalMAC(secret, tenant, sessionID, runID, a))
}

// parseToken reads a token's claims and MAC, without checking the MAC.
func parseToken(token string) (tokenClaims, []byte, error) {
	var c tokenClaims
	enc := base64.RawURLEncoding
	claimsPart, macPart, ok := strings.Cut(token, ".")
	if !ok {
		return c, nil, fmt.Errorf("%w: not a token", ErrApprovalTokenInvalid)
	}
	raw, err := enc.DecodeString(claimsPart)
	if err != nil {
		return c, nil, fmt.Errorf("%w: %v", ErrApprovalTokenInvalid, err)
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.V != 1 || c.SessionID == "" || c.ApprovalID == "" {
		return c, nil, fmt.Errorf("%w: unreadable claims", ErrApprovalTokenInvalid)
	}
	mac, err := enc.DecodeString(macPart)
	if err != nil || len(mac) != sha256.Size {
		return c, nil, fmt.Errorf("%w: unreadable signature", ErrApprovalTokenInvalid)
	}
	return c, mac, nil
}
