package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// update regenerates the results of the golden ledgers in testdata/resume
// and testdata/resume/approval (never the ledgers, which are fixed
// inputs).
var update = flag.Bool("update", false, "regenerate the results in testdata/resume and testdata/resume/approval")

// mintedID matches an id the host mints (see ledger.NewID).
var mintedID = regexp.MustCompile(`\b(evt|run|resp|msg)_[0-9A-HJKMNP-TV-Z]{26}\b`)

// normalize renders events the way the golden files hold them: ids minted
// while the test ran become "<prefix>_new<n>", numbered in order of first
// appearance; the times of those events and the durations of tool calls,
// which depend on the clock, are fixed.
func normalize(t *testing.T, events []ledger.Event) []byte {
	t.Helper()
	var out bytes.Buffer
	ids := map[string]string{}
	for _, e := range events {
		e.Time = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		if e.ToolResult != nil {
			r := *e.ToolResult
			r.DurationMS = 0
			e.ToolResult = &r
		}
		b, err := ledger.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b = mintedID.ReplaceAllFunc(b, func(id []byte) []byte {
			n, ok := ids[string(id)]
			if !ok {
				prefix, _, _ := strings.Cut(string(id), "_")
				n = fmt.Sprintf("%s_new%d", prefix, len(ids)+1)
				ids[string(id)] = n
			}
			return []byte(n)
		})
		out.Write(b)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// TestGoldenResume replays checked-in ledgers of runs a crash interrupted
// through the loop: each is put in a file store as it was left, resumed by a
// host whose model is hosttest's deterministic default, and what the resume
// appends must be the checked-in result (-update regenerates the results,
// never the ledgers). The host is a deterministic function of the ledger:
// the same ledger resumes the same way every time.
func TestGoldenResume(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "resume", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ledgers []string
	for _, p := range paths {
		if !strings.HasSuffix(p, ".result.jsonl") {
			ledgers = append(ledgers, p)
		}
	}
	if len(ledgers) < 6 {
		t.Fatalf("found %d ledgers in testdata/resume", len(ledgers))
	}
	for _, path := range ledgers {
		name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			store, _ := fileStoreWith(t, "golden", input)
			var charged, published atomic.Int32
			hs := hosttest.New(t, host.Options{Storage: store, HostID: "golden-host", Agent: host.Agent{Tools: goldenTools(&charged, &published),
				ToolApprovals: map[string]host.ApprovalMode{"charge": host.ApproveAlways, "publish": host.ApproveAlways}}})
			before := len(hs.Events("golden"))
			res, err := hs.Host.Resume(context.Background(), "golden")
			if err != nil {
				t.Fatalf("Resume: %v", err)
			}
			after := hs.Events("golden")
			if open := ledger.OpenRuns(after); len(open) != 0 {
				t.Errorf("runs left open: %v", open)
			}
			if end := after[len(after)-1].RunEnd; end == nil || end.Status != res.Status || after[len(after)-1].RunID != res.RunID {
				t.Errorf("the result %+v is not the ledger's last run-end %+v", res, after[len(after)-1])
			}
			if charged.Load() != 0 {
				t.Errorf("charge, not idempotent, ran %d times again", charged.Load())
			}
			got := normalize(t, after[before:])
			want := filepath.Join("testdata", "resume", name+".result.jsonl")
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, golden) {
				t.Errorf("resuming %s appended (run with -update to accept):\n%s\nwant:\n%s", path, got, golden)
			}
		})
	}
}

// TestGoldenApproval replays checked-in ledgers of runs parked on an
// approval request (testdata/resume/approval) through the loop: each is
// put in a file store as it was left, decided — approved or denied with
// Decide, or expired by a boot sweep, its request having lapsed — and
// continued by a host whose model is hosttest's deterministic default;
// what that appends must be the checked-in result (-update regenerates
// the results, never the ledgers).
func TestGoldenApproval(t *testing.T) {
	for _, tc := range []struct {
		ledger, how string
		published   int32  // runs of the publish call the decision led to
		says        string // in the answer
	}{
		{"parked", "approve", 1, "The publish tool returned: published with key call_2"},
		{"parked", "deny", 0, "a person denied this call (golden): not this one"},
		{"lapsed", "sweep", 0, "nobody approved this call in time"},
	} {
		name := tc.ledger + "." + tc.how
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(filepath.Join("testdata", "resume", "approval", tc.ledger+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			store, _ := fileStoreWith(t, "golden", input)
			var charged, published atomic.Int32
			opts := host.Options{Storage: store, HostID: "golden-host", Agent: host.Agent{Tools: goldenTools(&charged, &published)},
				ApprovalSecret: approvalSecret}
			if tc.how == "sweep" {
				opts.AutoResume = &host.AutoResume{}
			}
			events := hosttest.Load(t, store, "golden")
			runID, parked := "", false
			if open := ledger.OpenRuns(events); len(open) == 1 {
				runID, parked = open[0], ledger.Parked(events, open[0])
			}
			if !parked {
				t.Fatalf("%s.jsonl holds no parked run", tc.ledger)
			}
			before := len(events)
			hs := hosttest.New(t, opts)
			var res host.RunResult
			switch tc.how {
			case "sweep":
				<-hs.Host.SweepDone()
				after := hosttest.WaitLedger(t, store, "golden", time.Minute, "the run's end", hosttest.Settled)
				view, _ := ledger.ProjectRun(after, runID)
				res = host.RunResult{Status: view.Status, Text: view.Text, RunID: runID}
			default:
				d := host.ApprovalDecision{Approve: true, By: "golden"}
				if tc.how == "deny" {
					d = host.ApprovalDecision{Reason: "not this one", By: "golden"}
				}
				run, err := hs.Host.Session("golden").Decide(context.Background(), "appr_1", d)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				if res, err = run.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			after := hs.Events("golden")
			if res.Status != ledger.RunCompleted || res.RunID != runID || !strings.Contains(res.Text, tc.says) {
				t.Errorf("the continued run: %+v, want run %s completed saying %q", res, runID, tc.says)
			}
			if open := ledger.OpenRuns(after); len(open) != 0 {
				t.Errorf("runs left open: %v", open)
			}
			if published.Load() != tc.published || charged.Load() != 0 {
				t.Errorf("published %d times (want %d), charged %d", published.Load(), tc.published, charged.Load())
			}
			got := normalize(t, after[before:])
			want := filepath.Join("testdata", "resume", "approval", name+".result.jsonl")
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, golden) {
				t.Errorf("continuing %s.jsonl (%s) appended (run with -update to accept):\n%s\nwant:\n%s", tc.ledger, tc.how, got, golden)
			}
		})
	}
}

// TestGoldenResumeRefusesUnknownVersions: a ledger holding an event of a
// schema version this build does not know is not resumed: the error names
// the version, and nothing is appended.
func TestGoldenResumeRefusesUnknownVersions(t *testing.T) {
	input, err := os.ReadFile(filepath.Join("testdata", "resume", "bad", "future_version.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	store, dir := fileStoreWith(t, "bad", input)
	hs := hosttest.New(t, host.Options{Storage: store})
	_, err = hs.Host.Resume(context.Background(), "bad")
	if !errors.Is(err, ledger.ErrVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("Resume = %v, want an error wrapping ledger.ErrVersion", err)
	}
	if hs.Model.RequestCount() != 0 {
		t.Error("the model was called")
	}
	after, err := os.ReadFile(filepath.Join(dir, "bad.jsonl"))
	if err != nil || !bytes.Equal(after, input) {
		t.Errorf("the ledger changed (%v)", err)
	}
}

// fileStoreWith returns a file store (closed when the test ends) whose
// session id holds the ledger data, as a crash left it, and its directory.
func fileStoreWith(t *testing.T, id string, data []byte) (*file.Store, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, id+".jsonl"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, dir
}

// goldenTools are the tools the golden ledgers' runs call: lookup reads,
// charge has an external effect and is not idempotent, publish has one and
// is.
func goldenTools(charged, published *atomic.Int32) []host.Tool {
	obj := json.RawMessage(`{"type":"object"}`)
	return []host.Tool{
		host.NewTool(host.ToolSpec{Name: "lookup", InputSchema: obj}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: `{"weather":"sunny"}`, Source: "golden:lookup"}, nil
		}),
		host.NewTool(host.ToolSpec{Name: "charge", InputSchema: obj, Effect: host.EffectExternal}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			charged.Add(1)
			return host.ToolResult{Output: "charged"}, nil
		}),
		host.NewTool(host.ToolSpec{Name: "publish", InputSchema: obj, Effect: host.EffectExternal, Idempotent: true}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			published.Add(1)
			return host.ToolResult{Output: "published with key " + c.ID, Source: "golden:publish"}, nil
		}),
	}
}
