package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/demotools"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/storage"
)

// evalCmd implements "agentic-host eval": replay recorded sessions against a
// candidate model (package host/eval) and report.
func evalCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("eval", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	sessions := fs.String("sessions", "", "the sessions to replay: `IDS`, comma-separated")
	all := fs.Bool("all", false, "replay every session of the storage")
	model := env.Getenv("AGENTIC_MODEL")
	if model == "" {
		model = DefaultModel
	}
	modelSet := false
	fs.Func("model", "the candidate model `ID` (default $AGENTIC_MODEL, else "+DefaultModel+"; with --offline, "+fakemodel.DefaultModel+")", func(v string) error {
		model, modelSet = v, true
		return nil
	})
	system := fs.String("system", "", "the candidate's system prompt")
	maxSteps := fs.Int("max-steps", host.DefaultMaxSteps, "bound on the candidate's model passes per turn")
	base := env.Getenv("OPENROUTER_BASE_URL")
	if base == "" {
		base = provider.DefaultBaseURL
	}
	baseURL := fs.String("base-url", base, "the candidate's OpenAI-compatible base `URL` (default from OPENROUTER_BASE_URL); the key comes from OPENROUTER_API_KEY")
	offline := fs.Bool("offline", false, "the candidate is the fake model, in-process (no network), offered the demo tools' specs")
	idle := fs.Duration("idle-timeout", 60*time.Second, "fail (and retry) a model response whose connection stays silent for this `DURATION`")
	asJSON := fs.Bool("json", false, "print the whole report as JSON (every turn's texts and tool calls)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host eval (--sessions IDS | --all) [flags]\n\n"+
			"Replay recorded sessions against a candidate model: every recorded user turn\n"+
			"is sent again to a scratch session (nothing is written to --storage), every\n"+
			"tool call is answered from the recorded results (no tool or plugin runs, no\n"+
			"network but the candidate model), and the outcome, steps, tokens and cost of\n"+
			"each session are printed beside the recording's, with the first turn where\n"+
			"the answers or the tool calls diverge. Exit status 0 even when they diverge;\n"+
			"1 when a session could not be replayed.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fail(2, "unexpected arguments %q (name the sessions with --sessions)", pos)
	}
	if (*sessions == "") == !*all {
		fs.Usage()
		return fail(2, "want --sessions IDS or --all")
	}
	if *idle <= 0 {
		return fail(2, "--idle-timeout must be positive, got %s", *idle)
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storageURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	var ids []string
	if *all {
		l, ok := store.(storage.Lister)
		if !ok {
			return fail(2, "--all: storage %s cannot list its sessions; name them with --sessions", *storageURL)
		}
		if ids, err = l.ListSessions(ctx); err != nil {
			return fail(1, "list the sessions: %v", err)
		}
		if len(ids) == 0 {
			return fail(1, "no session in %s", *storageURL)
		}
	} else {
		for _, id := range strings.Split(*sessions, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	agent := host.Agent{Model: model, System: *system, MaxSteps: *maxSteps}
	pcfg := provider.Config{BaseURL: *baseURL, APIKey: env.Getenv("OPENROUTER_API_KEY"), IdleTimeout: *idle}
	if *offline {
		if !modelSet {
			agent.Model = fakemodel.DefaultModel
		}
		srv, err := fakemodel.Start(fakemodel.Options{})
		if err != nil {
			return fmt.Errorf("start the fake model: %w", err)
		}
		defer srv.Close()
		pcfg.BaseURL, pcfg.APIKey = srv.URL(), "offline"
		agent.Tools = append(agent.Tools, demotools.GetAccount())
	} else if err := checkEndpoint(*baseURL, pcfg.APIKey); err != nil {
		return err
	}
	client, err := provider.New(pcfg)
	if err != nil {
		return fail(2, "%v", err)
	}
	rep, err := eval.Run(ctx, eval.Options{Source: store, Model: client, Agent: agent, Sessions: ids})
	if errors.Is(err, eval.ErrInvalidOptions) {
		return fail(2, "%v", err)
	} else if err != nil {
		return fail(1, "%v", err)
	}
	if *asJSON {
		if err := pluginPrintJSON(env, rep); err != nil {
			return err
		}
	} else {
		printEval(env, rep)
	}
	if rep.Total.Errors > 0 {
		return fail(1, "%d of %d sessions could not be replayed", rep.Total.Errors, len(rep.Sessions))
	}
	return nil
}

// printEval prints a report as a table: a line per session, then the total.
func printEval(env Env, rep eval.Report) {
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "candidate %s\n", rep.Model)
	fmt.Fprintln(tw, "SESSION\tTURNS\tOUTCOME\tSTEPS\tTOKENS IN/OUT\tCOST\tDIVERGED")
	figures := func(r, c eval.Figures) []string {
		return []string{
			fmt.Sprintf("%s → %s", r.Status, c.Status),
			fmt.Sprintf("%d → %d", r.Steps, c.Steps),
			fmt.Sprintf("%d/%d → %d/%d", r.PromptTokens, r.CompletionTokens, c.PromptTokens, c.CompletionTokens),
			fmt.Sprintf("%s → %s", fmtUSD(r.Cost), fmtUSD(c.Cost)),
		}
	}
	for _, s := range rep.Sessions {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t\t%s\t\t\t\t\n", s.SessionID, s.Error)
			continue
		}
		div := "no"
		if s.Diverged {
			div = s.Divergence
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.SessionID, len(s.Turns), strings.Join(figures(s.Recorded, s.Candidate), "\t"), div)
	}
	t := rep.Total
	fmt.Fprintf(tw, "TOTAL\t%d sessions\t%s\t%d diverged, %d unmatched calls\n", t.Sessions,
		strings.Join(figures(t.Recorded, t.Candidate), "\t"), t.Diverged, t.Unmatched)
	tw.Flush()
	fmt.Fprintf(env.Stdout, "candidate: %d completed, %d failed", t.Completed, t.Failed)
	if t.Errors > 0 {
		fmt.Fprintf(env.Stdout, ", %d not replayed", t.Errors)
	}
	fmt.Fprintln(env.Stdout)
}

// fmtUSD formats a cost in USD.
func fmtUSD(c float64) string { return fmt.Sprintf("$%.6f", c) }
