// hostile is a TypeScript plugin that misbehaves in every way a script can,
// one tool each, for TestJavaScriptHostile; "ok" and "state" are well
// behaved.
import { tool, http, kv, log, config, validator, policy } from "../../../pdk/ts/agentic";

let calls = 0;

tool({ name: "ok", description: "Answers.", execute: () => ({ ok: true }) });

tool({ name: "echo", description: "Answers its input.", execute: (input) => input });

tool({
  name: "stamped",
  description: "POSTs steps 1 to n, each with the time and a random nonce, and answers the bodies.",
  inputSchema: { type: "object", properties: { url: { type: "string" }, steps: { type: "integer" } }, required: ["url", "steps"] },
  effect: "external",
  execute: (input: { url: string; steps: number }) => {
    const bodies: string[] = [];
    for (let step = 1; step <= input.steps; step++) {
      const body = JSON.stringify({ step, at: Date.now(), nonce: Math.random() });
      const res = http.post(input.url, body, { "Content-Type": "application/json" });
      if (res.status !== 200) throw new Error(`step ${step}: ${res.status}`);
      bodies.push(body);
    }
    return bodies;
  },
});

tool({ name: "dice", description: "Two random numbers.", execute: () => [Math.random(), Math.random()] });

tool({
  name: "state",
  description: "Counts its calls in a global: each call starts afresh, so 1.",
  execute: () => {
    calls++;
    (globalThis as any).leak = ((globalThis as any).leak ?? 0) + 1;
    return { calls, leak: (globalThis as any).leak };
  },
});

tool({ name: "spin", description: "Loops forever.", timeoutMs: 1000, execute: () => { for (;;) {} } });

tool({
  name: "spin_async",
  description: "Loops forever in a promise job.",
  timeoutMs: 1000,
  execute: async () => {
    await Promise.resolve();
    for (;;) {}
  },
});

tool({
  name: "memory_bomb",
  description: "Allocates without end.",
  execute: () => {
    const keep: number[][] = [];
    for (;;) keep.push(new Array(1 << 16).fill(keep.length));
  },
});

tool({
  name: "string_bomb",
  description: "Doubles a string without end.",
  execute: () => {
    let s = "x";
    for (;;) s = s + s;
  },
});

function deeper(n: number): number {
  return deeper(n + 1) + 1;
}

tool({ name: "recurse", description: "Recurses without end.", execute: () => deeper(0) });

tool({
  name: "flood_log",
  description: "Logs 20,000 lines.",
  execute: () => {
    for (let i = 0; i < 20000; i++) console.log("flood", i);
    return "logged";
  },
});

tool({
  name: "big_output",
  description: "Answers 2 MiB.",
  execute: () => "y".repeat(2 << 20),
});

tool({
  name: "never",
  description: "Awaits a promise nothing settles.",
  execute: () => new Promise(() => {}),
});

tool({
  name: "fail",
  description: "Throws.",
  execute: () => {
    throw new Error("account 7 not found");
  },
});

tool({
  name: "fetch",
  description: "GETs a URL.",
  inputSchema: { type: "object", properties: { url: { type: "string" } }, required: ["url"] },
  execute: (input: { url: string }) => {
    const res = http.get(input.url, { "X-Test": "1" });
    return { status: res.status, body: res.body, key: res.headers["x-idempotency-seen"] ?? "" };
  },
});

tool({
  name: "kv",
  description: "Writes a key, reads it back, deletes it.",
  inputSchema: { type: "object", properties: { key: { type: "string" }, value: { type: "string" } } },
  execute: (input: { key: string; value: string }) => {
    const before = kv.get(input.key) ?? null;
    kv.set(input.key, input.value);
    const after = kv.get(input.key);
    kv.delete(input.key);
    return { before, after, gone: kv.get(input.key) === undefined };
  },
});

tool({
  name: "config",
  description: "Reads its configuration and logs.",
  execute: () => {
    log.warn("config read");
    return { region: config("region") ?? null, missing: config("missing") ?? null };
  },
});

validator({
  name: "even",
  description: "An even number.",
  schema: { type: "number" },
  validate: (d: number) => (d % 2 === 0 ? { ok: true, value: d / 2 } : { ok: false, errors: [`/: ${d} is odd`] }),
});

policy({
  name: "careful",
  description: "Asks before anything that writes.",
  decide: (r) =>
    r.tool.effect === "read"
      ? { decision: "allow", reason: "reads" }
      : { decision: "require_approval", reason: "writes", summary: `${r.tool.name} for ${r.tenant}` },
});
