// Package cli implements the agentic-host command: its subcommands, flags
// and output. cmd/agentic-host only calls [Main].
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Env is what a command reads and writes; tests substitute their own.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// exitError carries a command's exit code and the message for stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

const usage = `agentic-host runs LLM agents durably.

Usage:
  agentic-host chat [flags] [MESSAGE]        chat with an agent (interactive without MESSAGE)
  agentic-host task --prompt TEXT --schema FILE.json [flags]
                                             run a task until the model submits a valid deliverable
  agentic-host transcript [flags] SESSION    print a session's transcript (or, with --usage, its usage) as JSON
                                             (--archive FILE: from an archive)
  agentic-host fork --at POINT [flags] SESSION
                                             make a new session from SESSION's ledger up to POINT, and run it
  agentic-host eval (--sessions IDS | --all) --model M [--json]
                                             replay recorded sessions against a candidate model, tools answered from the recording
  agentic-host plugin new|build|describe|call|list …
                                             write, build, inspect, call or list Wasm plugins
  agentic-host approvals [--json]            list the tool calls waiting for a person's approval
  agentic-host approve|deny SESSION ID       decide one, and continue its run
  agentic-host respond SESSION ID TEXT       answer one in the tool's place
  agentic-host event SESSION KEY [PAYLOAD]   post an event to a session, for a plugin call that waits for it
  agentic-host serve --config FILE           serve the multi-tenant HTTP + SSE API
  agentic-host keys create|list|revoke|hash  manage the API keys of serve
  agentic-host migrate [--storage URL] [--dry-run]
                                             rewrite every ledger of a store to the current schema version
  agentic-host delete [--tenant T] [--force] SESSION
                                             delete a session (refused while it is in use, unless --force)
  agentic-host tenant delete T --config FILE delete every trace of a tenant serve no longer serves
  agentic-host export --session ID|--tenant T -o FILE
                                             write sessions and their blobs to a portable archive
  agentic-host import [--replace] FILE       put an archive's sessions into a store
  agentic-host retention sweep --config FILE archive or delete the closed sessions past the tenants' retention
  agentic-host mcp --plugins DIR [--http ADDR]
                                             serve the plugins' tools to MCP clients (stdio, or HTTP)
  agentic-host fake-provider [flags]         run the fake OpenAI-compatible model server
  agentic-host version                       print the version

Storage (--storage URL): memory: (gone at exit), file:DIR (JSONL files; the
default is file:.agentic), file:DIR?fsync=1, redis://HOST:PORT/DB,
rediss://HOST:PORT/DB (TLS), redis+cluster://H1:P1,H2:P2.
The model: any OpenAI-compatible endpoint (--base-url, default OpenRouter;
the key comes from OPENROUTER_API_KEY); --offline runs a fake model here.

Flags go anywhere; a message word that starts with "-" goes after "--".
Run "agentic-host COMMAND -h" for a command's flags.
`

// storageHelp is the --storage flag's help.
const storageHelp = "storage `URL`: memory:, file:DIR[?fsync=1], redis://HOST:PORT/DB, rediss://…, redis+cluster://H1:P1,H2:P2"

// stamped is the version a release stamps into the binary (make release:
// -ldflags -X .../internal/cli.stamped=v1.2.3); "" in other builds.
var stamped string

// version returns the binary's version: the release's stamp, else the
// module version (or "devel"), then the commit it was built from, and the
// Go version.
func version() string {
	v, commit, dirty := "devel", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if stamped != "" {
		v = stamped
	}
	out := "agentic-host " + v
	if commit != "" {
		out += " (commit " + commit[:min(12, len(commit))]
		if dirty {
			out += ", modified"
		}
		out += ")"
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// Main runs the command line args (without the program name) and returns the
// process exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "chat":
		err = chat(ctx, args[1:], env)
	case "task":
		err = task(ctx, args[1:], env)
	case "transcript":
		err = transcript(ctx, args[1:], env)
	case "fork":
		err = forkCmd(ctx, args[1:], env)
	case "eval":
		err = evalCmd(ctx, args[1:], env)
	case "plugin":
		err = pluginCmd(ctx, args[1:], env)
	case "mcp":
		err = mcpCmd(ctx, args[1:], env)
	case "approvals":
		err = approvalsCmd(ctx, args[1:], env)
	case "approve", "deny", "respond":
		err = decideCmd(ctx, args[0], args[1:], env)
	case "event":
		err = eventCmd(ctx, args[1:], env)
	case "serve":
		err = serveCmd(ctx, args[1:], env)
	case "keys":
		err = keysCmd(ctx, args[1:], env)
	case "migrate":
		err = migrateCmd(ctx, args[1:], env)
	case "tenant":
		err = tenantCmd(ctx, args[1:], env)
	case "delete":
		err = deleteCmd(ctx, args[1:], env)
	case "retention":
		err = retentionCmd(ctx, args[1:], env)
	case "export":
		err = exportCmd(ctx, args[1:], env)
	case "import":
		err = importCmd(ctx, args[1:], env)
	case "fake-provider":
		err = fakeProvider(ctx, args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, usage)
		return 0
	case "version", "-version", "--version":
		fmt.Fprintln(env.Stdout, version())
		return 0
	default:
		fmt.Fprintf(env.Stderr, "agentic-host: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(env.Stderr, "agentic-host %s: %s\n", args[0], ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(env.Stderr, "agentic-host %s: %v\n", args[0], err)
	return 1
}

// newFlags returns a flag set that reports errors instead of exiting: a
// usage error to stderr, the help asked for with -h to stdout. It has the
// logging flags every subcommand takes (see newLogger).
func newFlags(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("agentic-host "+name, flag.ContinueOnError)
	fs.SetOutput(&flagOutput{Writer: env.Stderr, stdout: env.Stdout})
	addLogFlags(fs)
	return fs
}

// parse parses flags, turning a usage error into exit code 2. Help asked
// for (-h) goes to stdout; a usage error, with the usage, to stderr.
func parse(fs *flag.FlagSet, args []string) error {
	out, _ := fs.Output().(*flagOutput)
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	if out == nil {
		return err
	}
	fs.SetOutput(out)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		out.stdout.Write(buf.Bytes())
		return err
	}
	out.Write(buf.Bytes())
	if strings.Contains(err.Error(), "flag provided but not defined: -") {
		fmt.Fprintln(out, `(a message word that starts with "-" goes after "--": agentic-host chat -- -5 degrees)`)
	}
	return &exitError{code: 2}
}

// flagOutput is a flag set's output: stderr, for usage errors, knowing
// the stdout that help asked for goes to.
type flagOutput struct {
	io.Writer
	stdout io.Writer
}

// parseArgs parses flags placed before, between or after the positional
// arguments (so that "chat hi --offline" does not send "--offline" as
// text), and returns the positional ones. Everything after "--" is
// positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
