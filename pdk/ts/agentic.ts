// The TypeScript kit of agentic-host plugins.
//
// A plugin imports this file, registers its tools (and validators and
// approval policies) with tool(), validator() and policy(), and is built
// with `agentic-host plugin build`: TypeScript checks it, esbuild bundles
// it into one script, and the script goes into NAME.wasm beside the
// JavaScript engine it runs in (QuickJS-NG, from the npm package
// quickjs-wasi). The host runs it in the sandbox every plugin runs in:
// metered, within its memory and deadline, HTTP only to the hosts its
// tenant grants. Each call starts from the state the script left when it
// loaded: nothing a call leaves in globals is seen by the next.
//
// Host functions are synchronous (the host answers before the script goes
// on); a handler may still be async and await them, or anything else that
// settles within the call.

/** The plugin ABI version this kit speaks (1.1: with needs). */
export const ABI = "1.1";

declare const __agentic_host: (op: string, a?: string, b?: string) => string;

declare global {
  /** console writes to the host's log (log.info, log.warn, …). */
  var console: {
    log(...args: unknown[]): void;
    info(...args: unknown[]): void;
    debug(...args: unknown[]): void;
    warn(...args: unknown[]): void;
    error(...args: unknown[]): void;
  };
}

/** What a tool does to the world: the host's approvals and retries read it. */
export type Effect = "read" | "write" | "external";

/** A JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** The call in progress, as a tool's handler sees it. */
export interface Call {
  /** The tool's name. */
  tool: string;
  /** The call's id, stable across the host's retries and replays. */
  id: string;
  sessionId: string;
  tenant: string;
}

/** A tool: its description, which the model reads, and its handler. */
export interface ToolSpec<I = any> {
  name: string;
  description: string;
  /** A JSON Schema of an object; default {"type":"object"}. */
  inputSchema?: object;
  /** Default "read". */
  effect?: Effect;
  /** Whether calling it twice with the same input does what calling it once does. */
  idempotent?: boolean;
  /** The call's timeout in milliseconds; 0 (the default) means the tenant's. */
  timeoutMs?: number;
  /**
   * None of the tool's HTTP requests is sent twice: one in flight when
   * the host stopped is not sent again when the call is replayed, and the
   * call ends "outcome unknown".
   */
  atMostOnce?: boolean;
  /** Returns the tool's output (any JSON value) or throws its error. */
  execute(input: I, call: Call): unknown | Promise<unknown>;
}

/** A validator's answer: the value (default: the deliverable) or the problems. */
export type Validation = { ok: true; value?: unknown } | { ok: false; errors: string[] };

/** A deliverable validator. */
export interface ValidatorSpec {
  name: string;
  description: string;
  /** The deliverable's JSON Schema; default {}. */
  schema?: object;
  validate(deliverable: any): Validation | Promise<Validation>;
}

/** What an approval policy is asked. */
export interface PolicyRequest {
  policy: string;
  tool: { name: string; effect: string };
  input: any;
  sessionId: string;
  tenant: string;
  agent: string;
}

/** An approval policy's decision. */
export interface Decision {
  decision: "allow" | "require_approval" | "deny";
  reason?: string;
  summary?: string;
}

/** An approval policy. */
export interface PolicySpec {
  name: string;
  description: string;
  decide(request: PolicyRequest): Decision | Promise<Decision>;
}

/** What a plugin needs of its sandbox (see need). */
export interface Needs {
  /** The hosts it reaches: "api.example.com", "api.example.com:8443", "*.example.com". */
  allowedHosts?: string[];
  /** It reaches loopback or private addresses. */
  allowPrivateNetwork?: boolean;
  /** It uses the key-value store. */
  kv?: boolean;
}

let needs: Needs | undefined;

/**
 * need says what the plugin needs of its sandbox: it then runs with that
 * and no more, whatever its grant allows, is refused at load where it is
 * granted less, and a new version that needs more than the one serving is
 * held for a person's approval where the host holds upgrades that widen.
 * Called again, the last call wins; a plugin that never calls it gets its
 * whole grant.
 */
export function need(n: Needs): void {
  needs = { ...n, allowedHosts: [...(n.allowedHosts ?? [])] };
}

const tools = new Map<string, ToolSpec>();
const validators = new Map<string, ValidatorSpec>();
const policies = new Map<string, PolicySpec>();

/** tool registers a tool and returns it. */
export function tool<I = any>(spec: ToolSpec<I>): ToolSpec<I> {
  if (tools.has(spec.name)) throw new Error(`tool ${spec.name} is registered twice`);
  tools.set(spec.name, spec as ToolSpec);
  return spec;
}

/** validator registers a deliverable validator and returns it. */
export function validator(spec: ValidatorSpec): ValidatorSpec {
  validators.set(spec.name, spec);
  return spec;
}

/** policy registers an approval policy and returns it. */
export function policy(spec: PolicySpec): PolicySpec {
  policies.set(spec.name, spec);
  return spec;
}

// ---- Host functions -------------------------------------------------------

function hostCall(op: string, a?: string, b?: string): string {
  if (b !== undefined) return __agentic_host(op, a ?? "", b);
  if (a !== undefined) return __agentic_host(op, a);
  return __agentic_host(op);
}

/** The host's log, tagged with the plugin, tenant and call. */
export const log = {
  debug: (msg: string): void => void hostCall("log", "0", msg),
  info: (msg: string): void => void hostCall("log", "1", msg),
  warn: (msg: string): void => void hostCall("log", "2", msg),
  error: (msg: string): void => void hostCall("log", "3", msg),
};

/** The error of a host function: what the host refused or could not do. */
export class HostError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HostError";
  }
}

/** The tenant's key-value store (when its limits allow it); values are text. */
export const kv = {
  /** get returns the value of key, or undefined. */
  get(key: string): string | undefined {
    const res = hostCall("kv_get", key);
    if (res.length === 0) throw new HostError("kv.get: empty answer from the host");
    const rest = res.slice(1);
    switch (res.charCodeAt(0)) {
      case 1:
        return rest;
      case 0:
        return undefined;
    }
    throw new HostError(`kv.get ${key}: ${rest}`);
  },
  /** set stores value under key. */
  set(key: string, value: string): void {
    const err = hostCall("kv_set", key, value);
    if (err.length) throw new HostError(`kv.set ${key}: ${err}`);
  },
  /** delete removes key. */
  delete(key: string): void {
    const err = hostCall("kv_delete", key);
    if (err.length) throw new HostError(`kv.delete ${key}: ${err}`);
  },
};

/** A request the host sends for the plugin. */
export interface HttpRequest {
  method?: string;
  url: string;
  headers?: Record<string, string>;
  body?: string;
}

/** The answer to an HttpRequest. */
export interface HttpResponse {
  status: number;
  /** The response's headers, their names in lower case (values of one name joined by ", "). */
  headers: Record<string, string>;
  body: string;
  /** json parses the body. */
  json<T = any>(): T;
}

/**
 * HTTP through the host: only to the hosts the tenant grants, with the
 * tenant's secrets filled in where the request names them, and the
 * Idempotency-Key header of the call's place (see idempotencyKey). A
 * refused or failed request throws a HostError; any status is an answer.
 */
export const http = {
  request(req: HttpRequest): HttpResponse {
    const raw = hostCall("http_request", JSON.stringify({ method: req.method ?? "GET", url: req.url, headers: req.headers ?? {}, body: req.body ?? "" }));
    const res = JSON.parse(raw);
    if (typeof res.error === "string") throw new HostError(`http ${req.method ?? "GET"} ${req.url}: ${res.error}`);
    const body: string = res.body ?? "";
    return { status: res.status, headers: res.headers ?? {}, body, json: () => JSON.parse(body) };
  },
  get(url: string, headers?: Record<string, string>): HttpResponse {
    return http.request({ method: "GET", url, headers });
  },
  post(url: string, body: string, headers?: Record<string, string>): HttpResponse {
    return http.request({ method: "POST", url, body, headers });
  },
};

/** config returns the plugin's configuration value of key, or undefined. */
export function config(key: string): string | undefined {
  const res = hostCall("config", key);
  return res.charCodeAt(0) === 1 ? res.slice(1) : undefined;
}

/**
 * idempotencyKey returns the Idempotency-Key header the host puts on the
 * call's next HTTP request (unless the request sets its own): derived from
 * the session, the call id and the request's place in the call, the same
 * when the host replays the call after a crash.
 */
export function idempotencyKey(): string {
  return hostCall("idempotency_key");
}

/**
 * waitEvent waits for the event key to be posted to the call's session and
 * returns its payload. A durable call (a tool call of a run) holds nothing
 * while it waits: the host ends it there and replays it once the event is
 * posted, when this returns. Elsewhere it throws.
 */
export function waitEvent(key: string): string {
  const res = hostCall("wait_event", key);
  if (res.length === 0) throw new HostError("waitEvent: empty answer from the host");
  if (res.charCodeAt(0) !== 0) throw new HostError(`waitEvent ${key}: ${res.slice(1)}`);
  return res.slice(1);
}

/** waitFor waits ms milliseconds (durably in a durable call). */
export function waitFor(ms: number): void {
  const err = hostCall("wait_for", String(Math.max(0, Math.floor(ms))));
  if (err.length) throw new HostError(`waitFor: ${err}`);
}

// Math.random: a generator of the kit's own (sfc32), seeded from the
// host's random source at load and again at every call (each call starts
// from the memory the script left when it loaded, which would otherwise
// give every call the same numbers). In a durable call the seed is
// journaled with the call's other random numbers: a replay draws the same.
let rs = [0, 0, 0, 0];
function seed(): void {
  const hex = hostCall("random");
  const a = parseInt(hex.slice(0, 8), 16) | 0;
  const b = parseInt(hex.slice(8, 16), 16) | 0;
  rs = [a, b, a ^ 0x9e3779b9, b ^ 0x85ebca6b];
  for (let i = 0; i < 12; i++) random();
}
function random(): number {
  let [a, b, c, d] = rs;
  const t = (((a + b) | 0) + d) | 0;
  d = (d + 1) | 0;
  a = b ^ (b >>> 9);
  b = (c + (c << 3)) | 0;
  c = (c << 21) | (c >>> 11);
  c = (c + t) | 0;
  rs = [a, b, c, d];
  return (t >>> 0) / 4294967296;
}
Math.random = random;
seed();

// console goes to the host's log.
const say = (write: (msg: string) => void) => (...args: unknown[]) =>
  write(args.map((a) => (typeof a === "string" ? a : safeJSON(a))).join(" "));
(globalThis as any).console = { log: say(log.info), info: say(log.info), debug: say(log.debug), warn: say(log.warn), error: say(log.error) };

function safeJSON(v: unknown): string {
  try {
    return v instanceof Error ? `${v.name}: ${v.message}` : JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

// ---- The ABI (the host calls these; see plugins/jsvm.go) -------------------

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function describe(): string {
  return JSON.stringify({
    abi: ABI,
    tools: [...tools.values()].map((t) => ({
      name: t.name,
      description: t.description,
      input_schema: t.inputSchema ?? { type: "object" },
      effect: t.effect ?? "read",
      idempotent: t.idempotent ?? false,
      ...(t.atMostOnce ? { at_most_once: true } : {}),
      timeout_ms: t.timeoutMs ?? 0,
    })),
    validators: [...validators.values()].map((v) => ({ name: v.name, description: v.description, schema: v.schema ?? {} })),
    policies: [...policies.values()].map((p) => ({ name: p.name, description: p.description })),
    ...(needs
      ? { needs: { allowed_hosts: needs.allowedHosts ?? [], allow_private_network: needs.allowPrivateNetwork ?? false, kv: needs.kv ?? false } }
      : {}),
  });
}

async function serve(exp: string, input: string): Promise<string> {
  const req = input.length ? JSON.parse(input) : {};
  switch (exp) {
    case "describe":
      return describe();
    case "call": {
      const t = tools.get(req.tool);
      if (!t) return JSON.stringify({ error: `ts kit: unknown tool ${req.tool}` });
      const call: Call = { tool: req.tool, id: req.call_id ?? "", sessionId: req.session_id ?? "", tenant: req.tenant ?? "" };
      try {
        const out = await t.execute(req.input ?? {}, call);
        return JSON.stringify({ output: out === undefined ? null : out });
      } catch (e) {
        return JSON.stringify({ error: message(e) });
      }
    }
    case "validate": {
      const v = validators.get(req.validator);
      if (!v) return JSON.stringify({ error: `ts kit: unknown validator ${req.validator}` });
      try {
        const r = await v.validate(req.deliverable);
        if (r.ok) return JSON.stringify({ ok: true, value: r.value === undefined ? req.deliverable : r.value });
        return JSON.stringify({ ok: false, errors: r.errors });
      } catch (e) {
        return JSON.stringify({ error: message(e) });
      }
    }
    case "decide": {
      const p = policies.get(req.policy);
      if (!p) return JSON.stringify({ error: `ts kit: unknown policy ${req.policy}` });
      try {
        const d = await p.decide({
          policy: req.policy,
          tool: { name: req.tool?.name ?? "", effect: req.tool?.effect ?? "" },
          input: req.input ?? {},
          sessionId: req.session_id ?? "",
          tenant: req.tenant ?? "",
          agent: req.agent ?? "",
        });
        return JSON.stringify({ decision: d.decision, reason: d.reason ?? "", summary: d.summary ?? "" });
      } catch (e) {
        return JSON.stringify({ error: message(e) });
      }
    }
  }
  return JSON.stringify({ error: `ts kit: no export ${exp}` });
}

let answer: string | undefined;

(globalThis as any).__agentic_run = (exp: string, input: string): void => {
  answer = undefined;
  seed();
  serve(exp, input).then(
    (s) => {
      answer = s;
    },
    (e) => {
      answer = JSON.stringify({ error: message(e) });
    },
  );
};

(globalThis as any).__agentic_take = (): string | undefined => answer;
