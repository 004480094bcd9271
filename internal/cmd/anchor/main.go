// Command anchor is the host's side of the anchor benchmark (make
// bench-anchor): N runs of (tool call, then the final answer) through
// Session.Send, one Go tool, file storage, against an OpenAI-compatible
// server the caller started (agentic-host fake-provider --anchor). It
// prints the process's CPU time per model step (harness, HTTP client,
// parsing, ledger appends), as ../shared/bench's AI SDK harness prints its
// own against the same server:
//
//	{"runs":200,"steps":400,"cpu_us_per_step":…,"wall_ms_per_step":…}
//
// It fails (exit 1) when a run does not end with the expected answer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

func main() {
	base := flag.String("base-url", "", "the server's base `URL` (…/v1)")
	runs := flag.Int("runs", 200, "runs to measure, after 5 to warm up")
	storeKind := flag.String("storage", "file", "file (in a temporary directory) or memory")
	dir := flag.String("dir", "", "the `directory` the file store's temporary directory is made in (default: the system's, $TMPDIR)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the measured runs to `FILE`")
	flag.Parse()
	profileTo = *profile
	if err := run(*base, *runs, *storeKind, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "anchor:", err)
		os.Exit(1)
	}
}

func run(base string, runs int, storeKind, parent string) error {
	if base == "" {
		return fmt.Errorf("want -base-url")
	}
	var store storage.Storage
	switch storeKind {
	case "file":
		dir, err := os.MkdirTemp(parent, "anchor-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fs, err := file.Open(dir, file.Options{})
		if err != nil {
			return err
		}
		defer fs.Close()
		store = fs
	case "memory":
		store = memory.New()
	default:
		return fmt.Errorf("-storage %q: want file or memory", storeKind)
	}
	client, err := provider.New(provider.Config{BaseURL: base, APIKey: "x"})
	if err != nil {
		return err
	}
	getAccount := host.NewTool(host.ToolSpec{Name: "get_account", Description: "Look up an account",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)},
		func(_ context.Context, call host.ToolCall) (host.ToolResult, error) {
			var in struct{ ID string }
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return host.ToolResult{}, err
			}
			out, _ := json.Marshal(map[string]any{"id": in.ID, "balance": 1234.5})
			return host.ToolResult{Output: string(out)}, nil
		})
	h, err := host.New(host.Options{Storage: store, Model: client, Logger: slog.New(slog.DiscardHandler),
		Agent: host.Agent{Model: "fake/model", Tools: []host.Tool{getAccount}, MaxSteps: 5}})
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	ctx := context.Background()
	one := func(id string, i int) error {
		res, err := h.Session(id).Send(ctx, fmt.Sprintf(`CALL get_account {"id":"ACC-%d"}`, i), host.SendOptions{})
		if err != nil {
			return err
		}
		if !strings.HasPrefix(res.Text, "RESULT:") {
			return fmt.Errorf("run %d answered %q (%s %s)", i, res.Text, res.Status, res.Reason)
		}
		return nil
	}
	for i := range 5 {
		if err := one(fmt.Sprintf("warm-%d", i), i); err != nil {
			return err
		}
	}
	if profileTo != "" {
		f, err := os.Create(profileTo)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	c0, t0 := cpu(), time.Now()
	for i := range runs {
		if err := one(fmt.Sprintf("anchor-%d", i), i); err != nil {
			return err
		}
	}
	used, wall := cpu()-c0, time.Since(t0)
	pprof.StopCPUProfile()
	// The model passes the runs made, counted from the ledgers once the
	// clock stopped.
	steps := 0
	for i := range runs {
		events, err := h.Session(fmt.Sprintf("anchor-%d", i)).Events(ctx)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.Step != nil {
				steps++
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"runs": runs, "steps": steps,
		"cpu_us_per_step": float64(used.Microseconds()) / float64(steps), "wall_ms_per_step": float64(wall.Microseconds()) / 1000 / float64(steps)})
}

// profileTo names the CPU profile to write, if any.
var profileTo string

// cpu returns the process's user and system time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
