// The AssemblyScript kit for agentic-host plugins, over @extism/as-pdk.
//
// A plugin registers its tools, validators and policies at the top level
// of its entry file and re-exports the kit's exports; the kit reads the
// JSON envelope, dispatches, and writes the answer:
//
//   import { registerTool, Call, Output } from "../../../pdk/assemblyscript/index";
//   export { describe, call, validate, decide } from "../../../pdk/assemblyscript/index";
//
//   registerTool("shout", "Upper-case a text.", `{"type":"object"}`, "read", true, 0,
//     (c: Call): Output => Output.text(c.input.getString("text")!.toUpperCase()));
//
// Build (asc 0.28, the kit's abort handler, which logs and traps):
//
//   npx asc plugin.ts --outFile plugin.wasm -O3 --noAssert --use abort=agenticAbort
//
// Handlers see decoded strings and a small JSON reader (Json) over their
// input; they answer with Output (JSON, text or an error). Strings are
// exchanged with the host as UTF-8.

import { Host, Memory } from "@extism/as-pdk";

/** The plugin ABI version this kit speaks. */
export const ABI = "1.0";

// ---- The host's functions (extism:host/user) ----------------------------

@external("extism:host/user", "log")
declare function hostLog(level: i32, msg: u64): void;
@external("extism:host/user", "kv_get")
declare function hostKVGet(key: u64): u64;
@external("extism:host/user", "kv_set")
declare function hostKVSet(key: u64, value: u64): u64;
@external("extism:host/user", "kv_delete")
declare function hostKVDelete(key: u64): u64;
@external("extism:host/user", "http_request")
declare function hostHTTP(req: u64): u64;
@external("extism:host/user", "idempotency_key")
declare function hostIdempotencyKey(): u64;
@external("extism:host/user", "wait_event")
declare function hostWaitEvent(key: u64): u64;
@external("extism:host/user", "wait_for")
declare function hostWaitFor(ms: i64): u64;

function block(s: string): Memory {
  return Memory.allocateBytes(Uint8Array.wrap(String.UTF8.encode(s)));
}

@external("extism:host/env", "length")
declare function extismLength(off: u64): u64;

function readBlock(off: u64): Uint8Array {
  if (off == 0) return new Uint8Array(0);
  const mem = new Memory(off, extismLength(off));
  const data = mem.toUint8Array();
  mem.free();
  return data;
}

export const LOG_DEBUG: i32 = 0;
export const LOG_INFO: i32 = 1;
export const LOG_WARN: i32 = 2;
export const LOG_ERROR: i32 = 3;

/** log sends a line to the host's log, tagged with the plugin and tenant. */
export function log(level: i32, msg: string): void {
  const m = block(msg);
  hostLog(level, m.offset);
  m.free();
}

/** The answer of a key-value read: found, value, or an error. */
export class KVResult {
  constructor(public found: bool, public value: string, public error: string | null) {}
}

/** kvGet reads key from the tenant's key-value store (values are UTF-8). */
export function kvGet(key: string): KVResult {
  const k = block(key);
  const res = readBlock(hostKVGet(k.offset));
  k.free();
  if (res.length == 0) return new KVResult(false, "", "empty answer from the host");
  const rest = String.UTF8.decode(res.buffer.slice(1));
  if (res[0] == 1) return new KVResult(true, rest, null);
  if (res[0] == 0) return new KVResult(false, "", null);
  return new KVResult(false, "", rest);
}

/** kvSet stores value under key; it returns null or an error message. */
export function kvSet(key: string, value: string): string | null {
  const k = block(key);
  const v = block(value);
  const off = hostKVSet(k.offset, v.offset);
  k.free();
  v.free();
  if (off == 0) return null;
  return String.UTF8.decode(readBlock(off).buffer);
}

/** kvDelete removes key; it returns null or an error message. */
export function kvDelete(key: string): string | null {
  const k = block(key);
  const off = hostKVDelete(k.offset);
  k.free();
  if (off == 0) return null;
  return String.UTF8.decode(readBlock(off).buffer);
}

/**
 * httpRequest sends a request through the host, which allows only the
 * tenant's hosts. request is JSON: {"method","url","headers":{…},"body"};
 * the answer is JSON: {"status","headers","body"} or {"error"}.
 */
export function httpRequest(request: string): Json {
  const r = block(request);
  const res = readBlock(hostHTTP(r.offset));
  r.free();
  return new Json(String.UTF8.decode(res.buffer));
}

/**
 * idempotencyKey returns the Idempotency-Key header the host puts on the
 * call's next httpRequest (unless the request sets its own): derived from
 * the session, the call id and the request's place in the call, the same
 * when the host replays the call after a crash.
 */
export function idempotencyKey(): string {
  return String.UTF8.decode(readBlock(hostIdempotencyKey()).buffer);
}

/** WaitResult is waitEvent's answer: the payload, or the error. */
export class WaitResult {
  constructor(public payload: string, public error: string | null) {}
}

/**
 * waitEvent waits for the event key to be posted to the call's session and
 * returns its payload (as UTF-8 text). A durable call (a tool call of a
 * run) holds nothing while it waits: the host ends it there and replays it
 * once the event is posted, when this returns. Elsewhere it fails.
 */
export function waitEvent(key: string): WaitResult {
  const k = block(key);
  const res = readBlock(hostWaitEvent(k.offset));
  k.free();
  if (res.length == 0) return new WaitResult("", "wait_event: empty answer from the host");
  const rest = String.UTF8.decode(res.buffer.slice(1));
  if (res[0] != 0) return new WaitResult("", rest);
  return new WaitResult(rest, null);
}

/** waitFor waits ms milliseconds (durably in a durable call); null, or the error. */
export function waitFor(ms: i64): string | null {
  const off = hostWaitFor(ms);
  if (off == 0) return null;
  return String.UTF8.decode(readBlock(off).buffer);
}

// ---- JSON ---------------------------------------------------------------

function isWs(c: i32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

function skipWs(s: string, i: i32): i32 {
  while (i < s.length && isWs(s.charCodeAt(i))) i++;
  return i;
}

// skipValue returns the index past the value at i, or -1 when malformed.
function skipValue(s: string, i: i32, depth: i32): i32 {
  if (i >= s.length || depth > 128) return -1;
  const c = s.charCodeAt(i);
  if (c == 0x22) {
    for (i++; i < s.length; i++) {
      const d = s.charCodeAt(i);
      if (d == 0x5c) i++;
      else if (d == 0x22) return i + 1;
    }
    return -1;
  }
  if (c == 0x7b || c == 0x5b) {
    const close = c == 0x7b ? 0x7d : 0x5d;
    i = skipWs(s, i + 1);
    if (i < s.length && s.charCodeAt(i) == close) return i + 1;
    while (true) {
      if (c == 0x7b) {
        if (i >= s.length || s.charCodeAt(i) != 0x22) return -1;
        i = skipValue(s, i, depth + 1);
        if (i < 0) return -1;
        i = skipWs(s, i);
        if (i >= s.length || s.charCodeAt(i) != 0x3a) return -1;
        i = skipWs(s, i + 1);
      }
      i = skipValue(s, i, depth + 1);
      if (i < 0) return -1;
      i = skipWs(s, i);
      if (i < s.length && s.charCodeAt(i) == 0x2c) {
        i = skipWs(s, i + 1);
        continue;
      }
      if (i < s.length && s.charCodeAt(i) == close) return i + 1;
      return -1;
    }
  }
  const start = i;
  while (i < s.length) {
    const d = s.charCodeAt(i);
    if (d == 0x2c || d == 0x7d || d == 0x5d || isWs(d)) break;
    i++;
  }
  return i > start ? i : -1;
}

function hexDigit(c: i32): i32 {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  return -1;
}

/** A JSON value, as its raw text, with a small reader. */
export class Json {
  constructor(public text: string) {}

  /** kind is the first character: '{', '[', '"', 't', 'f', 'n', or '0' for numbers; "" for nothing. */
  kind(): string {
    const i = skipWs(this.text, 0);
    if (i >= this.text.length) return "";
    const c = this.text.charAt(i);
    if (c == "-" || (c >= "0" && c <= "9")) return "0";
    return c;
  }

  /** get returns the member key of an object, or null. */
  get(key: string): Json | null {
    const s = this.text;
    let i = skipWs(s, 0);
    if (i >= s.length || s.charCodeAt(i) != 0x7b) return null;
    i = skipWs(s, i + 1);
    while (i < s.length && s.charCodeAt(i) == 0x22) {
      const kend = skipValue(s, i, 1);
      if (kend < 0) return null;
      const k = new Json(s.substring(i, kend)).asString();
      i = skipWs(s, kend);
      if (i >= s.length || s.charCodeAt(i) != 0x3a) return null;
      i = skipWs(s, i + 1);
      const vend = skipValue(s, i, 1);
      if (vend < 0) return null;
      if (k != null && k == key) return new Json(s.substring(i, vend));
      i = skipWs(s, vend);
      if (i < s.length && s.charCodeAt(i) == 0x2c) i = skipWs(s, i + 1);
    }
    return null;
  }

  /** getString returns a string member, or null. */
  getString(key: string): string | null {
    const v = this.get(key);
    return v == null ? null : v.asString();
  }

  /** getInt returns an integer member, or def. */
  getInt(key: string, def: i64): i64 {
    const v = this.get(key);
    if (v == null || v.kind() != "0") return def;
    return I64.parseInt(v.text.trim());
  }

  /** asString decodes a JSON string, or returns null. */
  asString(): string | null {
    const s = this.text.trim();
    if (s.length < 2 || s.charCodeAt(0) != 0x22 || s.charCodeAt(s.length - 1) != 0x22) return null;
    const parts = new Array<string>();
    let start = 1;
    const end = s.length - 1;
    for (let i = 1; i < end; i++) {
      if (s.charCodeAt(i) != 0x5c) continue;
      parts.push(s.substring(start, i));
      i++;
      if (i >= end) return null;
      const e = s.charCodeAt(i);
      if (e == 0x6e) parts.push("\n");
      else if (e == 0x74) parts.push("\t");
      else if (e == 0x72) parts.push("\r");
      else if (e == 0x62) parts.push("\b");
      else if (e == 0x66) parts.push("\f");
      else if (e == 0x75) {
        if (i + 4 >= end + 1) return null;
        let cp = 0;
        for (let k = 1; k <= 4; k++) {
          const h = hexDigit(s.charCodeAt(i + k));
          if (h < 0) return null;
          cp = (cp << 4) | h;
        }
        parts.push(String.fromCharCode(cp)); // UTF-16: surrogate pairs stay pairs
        i += 4;
      } else parts.push(s.charAt(i)); // \" \\ \/
      start = i + 1;
    }
    parts.push(s.substring(start, end));
    return parts.join("");
  }

  /** items returns the elements of an array (empty for anything else). */
  items(): Json[] {
    const out = new Array<Json>();
    const s = this.text;
    let i = skipWs(s, 0);
    if (i >= s.length || s.charCodeAt(i) != 0x5b) return out;
    i = skipWs(s, i + 1);
    while (i < s.length && s.charCodeAt(i) != 0x5d) {
      const end = skipValue(s, i, 1);
      if (end < 0) break;
      out.push(new Json(s.substring(i, end)));
      i = skipWs(s, end);
      if (i < s.length && s.charCodeAt(i) == 0x2c) i = skipWs(s, i + 1);
    }
    return out;
  }

  toString(): string {
    return this.text;
  }
}

/** quote returns s as a JSON string literal. */
export function quote(s: string): string {
  const parts = new Array<string>();
  parts.push('"');
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc: string | null = null;
    if (c == 0x22) esc = '\\"';
    else if (c == 0x5c) esc = "\\\\";
    else if (c == 0x0a) esc = "\\n";
    else if (c == 0x0d) esc = "\\r";
    else if (c == 0x09) esc = "\\t";
    else if (c < 0x20) esc = "\\u00" + (c < 16 ? "0" : "") + c.toString(16);
    if (esc != null) {
      parts.push(s.substring(start, i));
      parts.push(esc);
      start = i + 1;
    }
  }
  parts.push(s.substring(start));
  parts.push('"');
  return parts.join("");
}

// ---- Items --------------------------------------------------------------

/** One tool call. */
export class Call {
  constructor(
    public tool: string,
    public id: string,
    public sessionId: string,
    public tenant: string,
    public input: Json,
  ) {}
}

/** A tool's answer: JSON, text (a JSON string), or an error message. */
export class Output {
  constructor(public json: string, public error: string | null) {}
  static json(raw: string): Output {
    return new Output(raw, null);
  }
  static text(s: string): Output {
    return new Output(quote(s), null);
  }
  static error(msg: string): Output {
    return new Output("", msg);
  }
}

/** What a validator reports. */
export class Validation {
  problems: string[] = [];
  value: string | null = null;
  failure: string | null = null;
  /** invalid records a problem at path (a JSON Pointer; "" for the whole deliverable). */
  invalid(path: string, message: string): void {
    this.problems.push((path.length ? path : "/") + ": " + message);
  }
  /** setValue replaces the value returned when valid (raw JSON). */
  setValue(raw: string): void {
    this.value = raw;
  }
  /** fail reports that the validator itself failed. */
  fail(message: string): void {
    this.failure = message;
  }
}

/** A tool call a policy decides on. */
export class PolicyRequest {
  constructor(
    public policy: string,
    public tool: string,
    public effect: string,
    public sessionId: string,
    public tenant: string,
    public agent: string,
    public input: Json,
  ) {}
}

/** A policy's verdict. */
export class Decision {
  constructor(public decision: string, public reason: string, public summary: string) {}
  static allow(reason: string): Decision {
    return new Decision("allow", reason, "");
  }
  static requireApproval(reason: string, summary: string): Decision {
    return new Decision("require_approval", reason, summary);
  }
  static deny(reason: string): Decision {
    return new Decision("deny", reason, "");
  }
}

class ToolEntry {
  constructor(
    public name: string,
    public description: string,
    public inputSchema: string,
    public effect: string,
    public idempotent: bool,
    public timeoutMs: i32,
    public handler: (c: Call) => Output,
    public atMostOnce: bool,
  ) {}
}

class ValidatorEntry {
  constructor(
    public name: string,
    public description: string,
    public schema: string,
    public handler: (deliverable: Json, v: Validation) => void,
  ) {}
}

class PolicyEntry {
  constructor(public name: string, public description: string, public handler: (r: PolicyRequest) => Decision) {}
}

const tools = new Array<ToolEntry>();
const validators = new Array<ValidatorEntry>();
const policies = new Array<PolicyEntry>();

/**
 * registerTool registers a tool. inputSchema is a JSON Schema (an object
 * schema; "" for {"type":"object"}); effect is "read", "write" or
 * "external"; timeoutMs 0 means the tenant's limit. With atMostOnce, none
 * of the tool's HTTP requests is sent twice: one in flight when the host
 * stopped is not sent again when the call is replayed, and the call ends
 * "outcome unknown".
 */
export function registerTool(
  name: string,
  description: string,
  inputSchema: string,
  effect: string,
  idempotent: bool,
  timeoutMs: i32,
  handler: (c: Call) => Output,
  atMostOnce: bool = false,
): void {
  tools.push(new ToolEntry(name, description, inputSchema, effect, idempotent, timeoutMs, handler, atMostOnce));
}

/** registerValidator registers a validator; schema is the deliverable's JSON Schema ("" for {}). */
export function registerValidator(
  name: string,
  description: string,
  schema: string,
  handler: (deliverable: Json, v: Validation) => void,
): void {
  validators.push(new ValidatorEntry(name, description, schema, handler));
}

/** registerPolicy registers an approval policy. */
export function registerPolicy(name: string, description: string, handler: (r: PolicyRequest) => Decision): void {
  policies.push(new PolicyEntry(name, description, handler));
}

// ---- Exports ------------------------------------------------------------

function respond(json: string): void {
  Host.output(Uint8Array.wrap(String.UTF8.encode(json)));
}

function input(): Json {
  return new Json(String.UTF8.decode(Host.input().buffer));
}

function str(v: string | null): string {
  return v == null ? "" : v;
}

export function describe(): i32 {
  const t = new Array<string>();
  for (let i = 0; i < tools.length; i++) {
    const e = tools[i];
    t.push(
      '{"name":' + quote(e.name) + ',"description":' + quote(e.description) +
        ',"input_schema":' + (e.inputSchema.length ? e.inputSchema : '{"type":"object"}') +
        ',"effect":' + quote(e.effect) + ',"idempotent":' + (e.idempotent ? "true" : "false") +
        (e.atMostOnce ? ',"at_most_once":true' : "") +
        ',"timeout_ms":' + e.timeoutMs.toString() + "}",
    );
  }
  const v = new Array<string>();
  for (let i = 0; i < validators.length; i++) {
    const e = validators[i];
    v.push('{"name":' + quote(e.name) + ',"description":' + quote(e.description) + ',"schema":' + (e.schema.length ? e.schema : "{}") + "}");
  }
  const p = new Array<string>();
  for (let i = 0; i < policies.length; i++) {
    const e = policies[i];
    p.push('{"name":' + quote(e.name) + ',"description":' + quote(e.description) + "}");
  }
  respond('{"abi":"' + ABI + '","tools":[' + t.join(",") + '],"validators":[' + v.join(",") + '],"policies":[' + p.join(",") + "]}");
  return 0;
}

export function call(): i32 {
  const req = input();
  const name = str(req.getString("tool"));
  let inp = req.get("input");
  if (inp == null) inp = new Json("{}");
  for (let i = 0; i < tools.length; i++) {
    if (tools[i].name != name) continue;
    const c = new Call(name, str(req.getString("call_id")), str(req.getString("session_id")), str(req.getString("tenant")), inp);
    const out = tools[i].handler(c);
    const err = out.error;
    if (err != null) respond('{"error":' + quote(err) + "}");
    else respond('{"output":' + (out.json.length ? out.json : "null") + "}");
    return 0;
  }
  respond('{"error":' + quote("as kit: unknown tool " + name) + "}");
  return 0;
}

export function validate(): i32 {
  const req = input();
  const name = str(req.getString("validator"));
  const d = req.get("deliverable");
  for (let i = 0; i < validators.length; i++) {
    if (validators[i].name != name || d == null) continue;
    const v = new Validation();
    validators[i].handler(d, v);
    const failure = v.failure;
    const value = v.value;
    if (failure != null) respond('{"error":' + quote(failure) + "}");
    else if (v.problems.length) {
      const ps = new Array<string>();
      for (let k = 0; k < v.problems.length; k++) ps.push(quote(v.problems[k]));
      respond('{"ok":false,"errors":[' + ps.join(",") + "]}");
    } else respond('{"ok":true,"value":' + (value != null ? value : d.text) + "}");
    return 0;
  }
  respond('{"error":' + quote("as kit: unknown validator " + name) + "}");
  return 0;
}

export function decide(): i32 {
  const req = input();
  const name = str(req.getString("policy"));
  let tool = req.get("tool");
  if (tool == null) tool = new Json("{}");
  let inp = req.get("input");
  if (inp == null) inp = new Json("{}");
  for (let i = 0; i < policies.length; i++) {
    if (policies[i].name != name) continue;
    const r = new PolicyRequest(name, str(tool.getString("name")), str(tool.getString("effect")),
      str(req.getString("session_id")), str(req.getString("tenant")), str(req.getString("agent")), inp);
    const d = policies[i].handler(r);
    respond('{"decision":' + quote(d.decision) + ',"reason":' + quote(d.reason) + ',"summary":' + quote(d.summary) + "}");
    return 0;
  }
  respond('{"error":' + quote("as kit: unknown policy " + name) + "}");
  return 0;
}

/**
 * agenticAbort replaces AssemblyScript's abort (build with
 * --use abort=agenticAbort; it is global, so the name works from any
 * entry file): it logs the message to the host at error level, then traps,
 * so the host discards the instance.
 */
@global export function agenticAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  log(LOG_ERROR, "abort: " + (message != null ? message : "") + " at " + (fileName != null ? fileName : "?") + ":" + line.toString() + ":" + column.toString());
  unreachable();
}
