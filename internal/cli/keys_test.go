package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/cli"
)

// TestKeysExpires: keys create --expires takes a duration (with days) or
// a time; the record and keys list show the expiry; a bad one is refused.
func TestKeysExpires(t *testing.T) {
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{in: "30d", want: now.AddDate(0, 0, 30)},
		{in: "1d12h", want: now.Add(36 * time.Hour)},
		{in: "90m", want: now.Add(90 * time.Minute)},
		{in: "2031-01-02", want: time.Date(2031, 1, 2, 0, 0, 0, 0, time.UTC)},
		{in: "2031-01-02T03:04:05+02:00", want: time.Date(2031, 1, 2, 1, 4, 5, 0, time.UTC)},
		{in: "0d", err: true},
		{in: "-5h", err: true},
		{in: "soon", err: true},
		{in: "xd", err: true},
	} {
		got, err := cli.ExpiryOf(tc.in, now)
		if (err != nil) != tc.err || (!tc.err && !got.Equal(tc.want)) {
			t.Errorf("%q: %v %v, want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}

	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "keys", "create", "--tenant", "acme", "--expires", "30d", "--json", "--storage", store)
	var made struct {
		Key    string
		Record struct {
			ID        string    `json:"id"`
			ExpiresAt time.Time `json:"expires_at"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &made) != nil || made.Record.ExpiresAt.IsZero() || !strings.HasPrefix(made.Key, "ak_") {
		t.Fatalf("keys create --expires: %d %s %s", code, out, errOut)
	}
	code, out, _ = run(t, "", "keys", "list", "--storage", store)
	if code != 0 || !strings.Contains(out, "EXPIRES") || !strings.Contains(out, made.Record.ExpiresAt.Format(time.RFC3339)) {
		t.Errorf("keys list: %d\n%s", code, out)
	}
	if code, _, errOut := run(t, "", "keys", "create", "--tenant", "acme", "--expires", "soon", "--storage", store); code != 2 || !strings.Contains(errOut, `--expires "soon"`) {
		t.Errorf("a bad --expires: %d %s", code, errOut)
	}
}

// TestKeysUser: keys create --user binds the key to an end user: its
// record and keys list name the user; a name that cannot be one is
// refused.
func TestKeysUser(t *testing.T) {
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "keys", "create", "--tenant", "acme", "--user", "alice@example.com", "--storage", store)
	if code != 0 || !strings.HasPrefix(out, "ak_") || !strings.Contains(errOut, "bound to user alice@example.com") {
		t.Fatalf("keys create --user: %d %s %s", code, out, errOut)
	}
	code, out, _ = run(t, "", "keys", "list", "--json", "--storage", store)
	var recs []struct {
		User string `json:"user"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 || recs[0].User != "alice@example.com" {
		t.Errorf("keys list --json: %d %s", code, out)
	}
	code, out, _ = run(t, "", "keys", "list", "--storage", store)
	if code != 0 || !strings.Contains(out, "USER") || !strings.Contains(out, "alice@example.com") {
		t.Errorf("keys list: %d\n%s", code, out)
	}
	if code, _, errOut := run(t, "", "keys", "create", "--tenant", "acme", "--user", "two words", "--storage", store); code != 1 || !strings.Contains(errOut, `user "two words"`) {
		t.Errorf("a bad --user: %d %s", code, errOut)
	}
}
