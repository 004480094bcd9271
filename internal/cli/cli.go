// Package cli implements the agentic-host command: its subcommands, flags
// and output. cmd/agentic-host only calls [Main].
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
  agentic-host plugin describe|call FILE.wasm …  inspect or call a Wasm plugin
  agentic-host mcp --plugins DIR [--http ADDR]  serve the plugins' tools to MCP clients (stdio, or HTTP)
  agentic-host fake-provider [flags]         run the fake OpenAI-compatible model server

Run "agentic-host COMMAND -h" for a command's flags.
`

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
	case "plugin":
		err = pluginCmd(ctx, args[1:], env)
	case "mcp":
		err = mcpCmd(ctx, args[1:], env)
	case "fake-provider":
		err = fakeProvider(ctx, args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, usage)
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

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("agentic-host "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// parse parses flags, turning a usage error into exit code 2.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2}
	}
	return nil
}
