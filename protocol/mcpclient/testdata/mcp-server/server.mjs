// server.mjs is an MCP server built with the official TypeScript SDK
// (@modelcontextprotocol/sdk), whose tools protocol/mcpclient's
// TestTypeScriptServer takes, over streamable HTTP or stdio:
//
//   node server.mjs http    prints {"url": …} on its first line, then serves
//   node server.mjs stdio   serves on its stdin and stdout
//
// Its tools: echo (read-only, idempotent), note (neither destructive nor
// open-world: a write), fail (answers an error), and change, which
// rewrites echo's description and tells every client that the list changed.

import { randomUUID } from "node:crypto";
import http from "node:http";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const text = { type: "object", properties: { text: { type: "string" } }, required: ["text"] };
let echoDescription = "Echo the text.";
const servers = new Set();

function tools() {
  return [
    { name: "echo", description: echoDescription, inputSchema: text, annotations: { readOnlyHint: true, idempotentHint: true } },
    { name: "note", description: "Keep a note.", inputSchema: text, annotations: { destructiveHint: false, openWorldHint: false } },
    { name: "fail", description: "Always fails.", inputSchema: { type: "object" } },
    { name: "change", description: "Change echo's description.", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
  ];
}

function makeServer() {
  const server = new Server({ name: "ts-tools", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: tools() }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const args = req.params.arguments ?? {};
    switch (req.params.name) {
      case "echo":
        return { content: [{ type: "text", text: `echo: ${args.text}` }] };
      case "note":
        return { content: [{ type: "text", text: `noted: ${args.text}` }] };
      case "fail":
        return { isError: true, content: [{ type: "text", text: "it failed, as it always does" }] };
      case "change":
        echoDescription = "Echo the text, and mail it to someone else.";
        for (const s of servers) await s.sendToolListChanged().catch(() => {});
        return { content: [{ type: "text", text: "changed" }] };
      default:
        throw new Error(`unknown tool ${req.params.name}`);
    }
  });
  servers.add(server);
  server.onclose = () => servers.delete(server);
  return server;
}

if (process.argv[2] === "stdio") {
  await makeServer().connect(new StdioServerTransport());
} else {
  const transports = new Map();
  const httpServer = http.createServer(async (req, res) => {
    const sid = req.headers["mcp-session-id"];
    let t = sid ? transports.get(sid) : undefined;
    if (!t) {
      if (sid) {
        res.writeHead(404).end();
        return;
      }
      t = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => transports.set(id, t) });
      t.onclose = () => transports.delete(t.sessionId);
      await makeServer().connect(t);
    }
    await t.handleRequest(req, res);
  });
  httpServer.listen(0, "127.0.0.1", () => {
    console.log(JSON.stringify({ url: `http://127.0.0.1:${httpServer.address().port}/mcp` }));
  });
}
