package a2a

import (
	"github.com/a2aproject/a2a-go/a2a"
)

// CardPath is where an agent's card is served, below the agent's base
// URL (the JavaScript client's default, resolved against a base URL that
// ends with a slash).
const CardPath = ".well-known/agent-card.json"

// CardOptions describe an agent for its card.
type CardOptions struct {
	// Name is the agent's name. Required.
	Name string
	// Description says what the agent does. Default: a sentence naming
	// the agent.
	Description string
	// URL is the absolute URL of the agent's JSON-RPC endpoint.
	// Required.
	URL string
	// Version is the agent's version. Default: "0.0.0".
	Version string
	// DocumentationURL links to the agent's documentation. Default:
	// none.
	DocumentationURL string
}

// SecuritySchemeName names the card's one security scheme: the tenant's
// API key, sent as "Authorization: Bearer KEY".
const SecuritySchemeName = "bearer"

// Card returns the agent card of an agent: JSON-RPC transport at
// opts.URL, streaming (message/stream and tasks/resubscribe), no push
// notifications and no extended card; text in and out (files and JSON
// data in); authenticated with a bearer key; one skill, the agent itself.
func Card(opts CardOptions) a2a.AgentCard {
	desc := opts.Description
	if desc == "" {
		desc = "The agent " + opts.Name + " of an agentic-host service: send it a message, and follow the task that answers."
	}
	version := opts.Version
	if version == "" {
		version = "0.0.0"
	}
	return a2a.AgentCard{
		Name:               opts.Name,
		Description:        desc,
		URL:                opts.URL,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    ProtocolVersion,
		Version:            version,
		DocumentationURL:   opts.DocumentationURL,
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain", "application/json", "image/*", "application/octet-stream"},
		DefaultOutputModes: []string{"text/plain"},
		SecuritySchemes: a2a.NamedSecuritySchemes{SecuritySchemeName: a2a.HTTPAuthSecurityScheme{Scheme: "bearer",
			Description: "The tenant's API key: Authorization: Bearer KEY"}},
		Security: []a2a.SecurityRequirements{{SecuritySchemeName: a2a.SecuritySchemeScopes{}}},
		Skills: []a2a.AgentSkill{{ID: opts.Name, Name: opts.Name, Description: desc, Tags: []string{"agent"},
			Examples: []string{}}},
	}
}
