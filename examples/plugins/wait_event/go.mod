module github.com/agentichost/agentic/examples/plugins/wait_event

go 1.24.0

require github.com/agentichost/agentic/pdk v0.0.0

require github.com/extism/go-pdk v1.1.3 // indirect

replace github.com/agentichost/agentic/pdk => ../../../pdk
