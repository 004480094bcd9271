module github.com/agentichost/agentic/plugins/testdata/stamped

go 1.24.0

require (
	github.com/agentichost/agentic/pdk v0.0.0
	github.com/extism/go-pdk v1.1.3
)

replace github.com/agentichost/agentic/pdk => ../../../pdk
