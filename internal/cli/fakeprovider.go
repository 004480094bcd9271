package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentichost/agentic/internal/fakemodel"
)

func fakeProvider(ctx context.Context, args []string, env Env) error {
	fs := newFlags("fake-provider", env)
	addr := fs.String("addr", "127.0.0.1:8089", "listen `HOST:PORT`")
	latency := fs.Duration("latency", 0, "pause between streamed chunks")
	words := fs.Int("words-per-chunk", 0, "words in each streamed chunk of text (0: the fake's default, 3)")
	anchor := fs.Bool("anchor", false, "answer as the anchor benchmark expects: \"CALL tool {json}\" calls the tool with those arguments, a tool result is answered \"RESULT: …\"")
	var windows pluginList
	fs.Var(&windows, "context-window", "list `MODEL=TOKENS` in the models endpoint with that context window (repeatable), so that a client compacts early")
	faults := fs.String("faults", "", "inject faults at random: `SPEC` such as rate=0.3,kinds=429+500+sever+stall,seed=7 (kinds: 429 500 502 503 401 402 overflow drop sever stall errorchunk nofinish finisherror, or all)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host fake-provider [flags]\n\nRun the fake OpenAI-compatible model server used by tests and the offline demo.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	opts := fakemodel.Options{Addr: *addr, Latency: *latency, ChunkSize: *words}
	if *anchor {
		opts.Respond = fakemodel.AnchorReply
	}
	for _, w := range windows {
		name, n, ok := strings.Cut(w, "=")
		tokens, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || tokens <= 0 {
			return fail(2, "--context-window %q: want MODEL=TOKENS", w)
		}
		if opts.Models == nil {
			opts.Models = map[string]int{}
		}
		opts.Models[name] = tokens
	}
	if *faults != "" {
		spec, err := fakemodel.ParseFaults(*faults)
		if err != nil {
			return fail(2, "--faults: %v", err)
		}
		spec.Apply(&opts)
	}
	srv, err := fakemodel.Start(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(env.Stdout, "fake model listening; base URL %s\n", srv.URL())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
