package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

func transcript(ctx context.Context, args []string, env Env) error {
	fs := newFlags("transcript", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	usageOnly := fs.Bool("usage", false, "print the session's usage instead: tokens and billed cost (USD), per run and in total")
	traffic := fs.Bool("traffic", false, "print what each plugin tool call did through the host's functions instead: its HTTP requests and key-value accesses, as text")
	asJSON := fs.Bool("json", false, "with --traffic: print the calls and their traffic records as JSON (response bodies and values included)")
	archivePath := fs.String("archive", "", "read the session from the archive `FILE` (agentic-host export, a retention archive) instead of a store; SESSION may be left out when it holds one")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host transcript [flags] SESSION\n       agentic-host transcript --archive FILE [SESSION]\n\nPrint the session's transcript as JSON (with --usage, its usage and cost; with\n--traffic, what its plugin tool calls did through the host's functions).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 && (*archivePath == "" || len(pos) != 0) {
		fs.Usage()
		return fail(2, "want exactly one SESSION, got %d arguments", len(pos))
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	var id string
	var events []ledger.Event
	var store storage.Storage // none for an archive
	if *archivePath != "" {
		a, err := readArchive(*archivePath)
		if err != nil {
			return err
		}
		s, err := archiveSession(a, *archivePath, strings.Join(pos, ""))
		if err != nil {
			return err
		}
		id, events = s.ID, s.Events
	} else {
		id = pos[0]
		if !storage.ValidSessionID(id) {
			return fail(2, "invalid session id %q", id)
		}
		var closeStore func() error
		store, closeStore, err = openStorage(*storageURL)
		if err != nil {
			return fail(2, "%v", err)
		}
		defer closeStore()
		events, err = store.Load(ctx, id)
		if err == nil {
			events, err = host.ResolveBlobs(ctx, store, events)
		}
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return fail(1, "no session %s in %s", id, *storageURL)
		}
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if *usageOnly {
		return enc.Encode(ledger.UsageOf(events))
	}
	if *traffic {
		return printTraffic(env.Stdout, enc, events, *asJSON)
	}
	if *asJSON {
		return fail(2, "--json goes with --traffic (the transcript is JSON already)")
	}
	// No run of this process is live: an open run in the ledger shows as
	// interrupted.
	t := ledger.ProjectSession(id, events)
	if store != nil { // an archive keeps no index of forks
		if t.Forks, err = host.ForksOf(ctx, store, "", id); err != nil {
			return fail(1, "%v", err)
		}
	}
	return enc.Encode(ledger.WireTranscript(t))
}

// trafficCall is one tool call of a session with its traffic, as
// transcript --traffic --json prints it.
type trafficCall struct {
	CallID  string              `json:"call_id"`
	Tool    string              `json:"tool"`
	RunID   string              `json:"run_id"`
	Source  string              `json:"source,omitempty"`
	IsError bool                `json:"is_error,omitempty"`
	Traffic *ledger.ToolTraffic `json:"traffic"`
}

// printTraffic prints the traffic of the session's plugin tool calls.
func printTraffic(w io.Writer, enc *json.Encoder, events []ledger.Event, asJSON bool) error {
	var calls []trafficCall
	for _, c := range ledger.RecordedCalls(events) {
		if c.Result.Traffic == nil {
			continue
		}
		calls = append(calls, trafficCall{CallID: c.Call.ID, Tool: c.Call.Name, RunID: c.RunID, Source: c.Result.Source,
			IsError: c.Result.IsError, Traffic: c.Result.Traffic})
	}
	if asJSON {
		if calls == nil {
			calls = []trafficCall{}
		}
		return enc.Encode(calls)
	}
	if len(calls) == 0 {
		fmt.Fprintln(w, "no plugin tool call recorded traffic")
		return nil
	}
	for _, c := range calls {
		summary := c.Traffic.Summary()
		if summary == "" {
			summary = "no host-function traffic"
		}
		fmt.Fprintf(w, "%s %s (%s): %s\n", c.CallID, c.Tool, shortHash(c.Source), summary)
		for _, line := range trafficLines(c.Traffic) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	return nil
}

// trafficLines describes a traffic record, one line per access, in the
// order they happened.
func trafficLines(t *ledger.ToolTraffic) []string {
	type line struct {
		seq  int
		text string
	}
	var lines []line
	for _, x := range t.HTTP {
		s := fmt.Sprintf("http %s %s", x.Method, x.URL)
		switch {
		case x.Error != "":
			s += " → error: " + x.Error
		default:
			s += fmt.Sprintf(" → %d, %d bytes", x.Status, x.ResponseBytes)
		}
		if x.RequestBytes > 0 {
			s += fmt.Sprintf(" (sent %d bytes, %s)", x.RequestBytes, shortHash(x.RequestDigest))
		}
		if x.BodyOmitted {
			s += " [body not recorded]"
		}
		if x.DurationMS > 0 {
			s += fmt.Sprintf(" in %d ms", x.DurationMS)
		}
		lines = append(lines, line{x.Seq, s})
	}
	for _, a := range t.KV {
		s := fmt.Sprintf("kv %s %q", a.Op, a.KeyText())
		switch {
		case a.Error != "":
			s += " → error: " + a.Error
		case a.Op == ledger.KVGet && !a.Found:
			s += " → not found"
		case a.Op == ledger.KVGet:
			s += fmt.Sprintf(" → %d bytes (%s)", a.ValueBytes, shortHash(a.ValueDigest))
		case a.Op == ledger.KVSet:
			s += fmt.Sprintf(" ← %d bytes (%s)", a.ValueBytes, shortHash(a.ValueDigest))
		}
		if a.ValueOmitted {
			s += " [value not recorded]"
		}
		lines = append(lines, line{a.Seq, s})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].seq < lines[j].seq })
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("%d %s", l.seq, l.text)
	}
	if t.Truncated {
		out = append(out, fmt.Sprintf("… %d more not recorded", t.Dropped))
	}
	return out
}
