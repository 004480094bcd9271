package provider

import (
	"context"
	"testing"

	"github.com/agentichost/agentic/internal/fixtures"
)

func BenchmarkStream(b *testing.B) {
	for _, name := range []string{"stream_text.sse", "stream_tool_calls.sse"} {
		b.Run(name, func(b *testing.B) {
			fs := serve(b, reply{body: fixtures.Bytes(name)})
			c := newClient(b, fs, Config{})
			req := userRequest("q")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Stream(context.Background(), req, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
