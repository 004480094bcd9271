// Package mcpclient makes the tools of a Model Context Protocol server the
// tools of an agent, through the official MCP Go SDK's client: a remote
// server over streamable HTTP, or a local one started over stdio.
//
// A [Source] is a [host.Toolset]. Each of the server's tools joins the
// agent's tools under a namespaced name (the server's name, two
// underscores, the tool's: providers accept [A-Za-z0-9_-] only, so not a
// dot; a tool whose name does not fit, or is listed twice, is refused,
// and servers whose prefixes could make one name are refused by
// [Collisions]). Its effect is external (it waits for approval where
// external tools do), unless the configuration says otherwise: per tool
// ([ToolOverride]), or by trusting the server's annotations
// (Server.TrustAnnotations), which are its claims: readOnlyHint: read;
// otherwise destructiveHint or openWorldHint (both true when absent, as
// the specification says): external; else write; idempotentHint:
// idempotent. Approvals and policies decide on them as on any tool.
//
// A call fails with a typed error the model reads: [ErrUnreachable] (the
// server cannot be reached, or dropped the connection), [ErrTimeout] (the
// call's deadline passed), [ErrProtocol] (the server answered with a
// JSON-RPC error or something that is not a tool result), [ErrToolError]
// (the tool reported an error: isError) or [ErrTooLarge] (the answer was
// larger than Server.MaxMessageBytes: a [LimitError]). Its output is
// capped (Server.MaxOutputBytes). Its result names the server, the tool
// and a digest of the tool's definition at the time
// (host.ToolResult.Source: "mcp:SERVER/TOOL@sha256:HEX"), which the
// ledger records.
//
// Every message of the server is bounded as it is read, not after: a JSON
// answer's body, each event of an SSE stream (the SDK's decoder is given
// the same bound, and the Source counts the bytes alike, to say why the
// connection failed), each line of a local server's output. Past the
// bound the message is refused before more than one byte past it is read,
// and the connection is made again. What reaches the model is bounded
// too: a listing of more than Server.MaxTools tools is refused whole
// ([ErrTooManyTools]), a definition larger than Server.MaxDefinitionBytes
// alone ([Status].Refused). A local server gets only the few variables of
// the host's environment every program needs, and Server.Env.
//
// The rug-pull guard: the definitions a Source first lists (or the pins
// it is given, Server.Pins) are trusted; an empty first listing is a
// first use too (its pins an empty set, not nil), after which every tool
// is new. When the server's list changes (notifications/tools/list_changed,
// or a reconnection), a tool whose definition changed — its description,
// input schema or annotations — and a tool the server did not offer
// before are held: withheld from the agent until a person approves them
// ([Source.Approve]), as a plugin version that widens is. A tool removed
// goes at once. A server whose definitions flap is told of boundedly (a
// definition held again once; a tool, or a server, that keeps changing a
// few times, then as [Flapping]), its reconnections and listings paced.
//
// Credentials (a bearer token, OAuth client credentials) are the HTTP
// client's: the host adds them to the requests, and neither the model, the
// ledger nor the logs see them. The caller gives the HTTP client that
// enforces its egress rules (plugins.EgressClient) in Server.HTTPClient.
package mcpclient
