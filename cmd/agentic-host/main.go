// Command agentic-host runs LLM agents durably: chat with an agent, print a
// session's transcript, or run the fake model server. See "agentic-host help".
package main

import (
	"context"
	"os"

	"github.com/agentichost/agentic/internal/cli"
)

func main() {
	env := cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(cli.Main(context.Background(), os.Args[1:], env))
}
