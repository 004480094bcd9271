module github.com/agentichost/agentic/pdk

go 1.24.0

require github.com/extism/go-pdk v1.1.3
