// Command mcpenv is an MCP server over stdio whose one tool, env, answers
// the environment the server was started with: what the tests of
// --mcp-stdio's environment read.
package main

import (
	"context"
	"os"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpenv", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "env", Description: "The server's environment.", InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			env := os.Environ()
			slices.Sort(env)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(env, "\n")}}}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}
