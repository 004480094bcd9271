// client.mjs drives `agentic-host mcp` with the official TypeScript MCP
// client (@modelcontextprotocol/sdk), over stdio or streamable HTTP, and
// prints what it saw as one JSON object for internal/cli's TestMCPTypeScriptClient
// (internal/cli/mcp_test.go).
//
//   node client.mjs '{"transport":"stdio","command":BIN,"args":[…],"dir":…,"swap":{…},"site":URL}'
//   node client.mjs '{"transport":"http","url":URL,"key":KEY,"dir":…,"swap":{…},"site":URL}'
//
// The scenario: list the tools; call a Go, an AssemblyScript and a C plugin;
// hot-swap a plugin file and wait for notifications/tools/list_changed;
// call as the agent "intern" (the policy denies it); call a tool that traps;
// call an external tool, approving it when asked (elicitation).

import { copyFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const cfg = JSON.parse(process.argv[2]);
const report = { transport: cfg.transport, calls: {} };

function transport(key) {
  if (cfg.transport === "stdio") {
    return new StdioClientTransport({ command: cfg.command, args: cfg.args, stderr: "inherit" });
  }
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  return new StreamableHTTPClientTransport(new URL(cfg.url), { requestInit: { headers } });
}

async function connect(name, { elicit = false, key = cfg.key } = {}) {
  const client = new Client({ name, version: "1.0.0" }, { capabilities: elicit ? { elicitation: {} } : {} });
  if (elicit) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      report.asked = req.params.message;
      return { action: "accept", content: {} };
    });
  }
  await client.connect(transport(key));
  return client;
}

function outcome(res) {
  return {
    isError: Boolean(res.isError),
    text: res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n"),
    meta: res._meta ?? {},
  };
}

function within(promise, ms, what) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms (a guard against a hang)`)), ms);
  });
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer));
}

async function main() {
  if (cfg.transport === "http") {
    try {
      const c = await connect("no-key", { key: "" });
      await c.listTools();
      report.unauthorized = "connected without the key";
    } catch (err) {
      report.unauthorized = `HTTP ${err.code}: ${err}`;
    }
  }

  const ops = await connect("ops", { elicit: true });
  let notified;
  const changed = new Promise((resolve) => {
    notified = resolve;
  });
  ops.setNotificationHandler(ToolListChangedNotificationSchema, () => notified(true));

  const { tools } = await ops.listTools();
  report.tools = tools.map((t) => ({
    name: t.name,
    annotations: t.annotations ?? {},
    module: t._meta?.["agentic-host/module"],
    schema: t.inputSchema,
  }));

  for (const [name, args] of [
    ["get_account", { account_id: "42" }],
    ["text_stats", { text: "Hello there. General Kenobi!" }],
    ["count_vowels", { text: "Hello, plugins" }],
  ]) {
    report.calls[name] = outcome(await ops.callTool({ name, arguments: args }));
  }

  // Hot swap: a new version of a plugin, written beside the directory's
  // file and renamed over it.
  const tmp = join(cfg.dir, ".swap.tmp");
  copyFileSync(cfg.swap.from, tmp);
  renameSync(tmp, join(cfg.dir, cfg.swap.to));
  report.swap = { notified: await within(changed, 60000, "notifications/tools/list_changed") };
  const after = (await ops.listTools()).tools.find((t) => t.name === cfg.swap.tool);
  report.swap.module = after?._meta?.["agentic-host/module"];
  report.swap.call = outcome(await ops.callTool({ name: cfg.swap.tool, arguments: cfg.swap.args }));

  const intern = await connect("intern");
  report.denied = outcome(await intern.callTool({ name: "get_account", arguments: { account_id: "42" } }));
  await intern.close();

  report.trap = outcome(await ops.callTool({ name: "trap", arguments: {} }));
  report.approved = outcome(await ops.callTool({ name: "fetch", arguments: { url: cfg.site, method: "GET" } }));
  await ops.close();
}

main().then(
  () => {
    process.stdout.write(JSON.stringify(report) + "\n");
    process.exit(0);
  },
  (err) => {
    report.error = String(err?.stack ?? err);
    process.stdout.write(JSON.stringify(report) + "\n");
    process.exit(1);
  },
);
