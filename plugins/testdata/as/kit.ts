// kit.ts — a test plugin exercising the AssemblyScript kit: a tool using
// the host functions, a validator and a policy.

import {
  registerTool, registerValidator, registerPolicy, Call, Output, Json, Validation,
  PolicyRequest, Decision, kvGet, kvSet, kvDelete, log, httpRequest, quote, LOG_INFO,
  idempotencyKey, waitEvent, waitFor,
} from "../../../pdk/assemblyscript/index";
export { describe, call, validate, decide } from "../../../pdk/assemblyscript/index";

registerTool("remember", "Store a note, read it back, optionally fetch a URL.", "", "write", false, 0, (c: Call): Output => {
  const note = c.input.getString("note");
  if (note == null) return Output.error("note is required");
  log(LOG_INFO, "remembering for " + c.tenant + " in call " + c.id);
  const err = kvSet("note", note);
  if (err != null) return Output.error(err);
  const got = kvGet("note");
  const missing = kvGet("missing");
  const delErr = kvDelete("note");
  let fetched = "null";
  const url = c.input.getString("url");
  if (url != null) fetched = httpRequest('{"url":' + quote(url) + "}").text;
  return Output.json('{"found":' + (got.found ? "true" : "false") + ',"value":' + quote(got.value) +
    ',"missing":' + (missing.found ? "true" : "false") + ',"deleted":' + (delErr == null ? "true" : "false") +
    ',"fetched":' + fetched + "}");
});

registerTool("keyed", "Send a GET with the call's idempotency key.", "", "external", false, 0, (c: Call): Output => {
  const key = idempotencyKey();
  const url = c.input.getString("url");
  if (url == null) return Output.error("keyed needs a url");
  const fetched = httpRequest('{"url":' + quote(url) + "}").text;
  return Output.json('{"key":' + quote(key) + ',"fetched":' + fetched + "}");
});

registerTool("waits", "Wait outside a durable call.", "", "read", false, 0, (c: Call): Output => {
  const waited = waitFor(1);
  const ev = waitEvent("order-42-paid");
  const evErr = ev.error;
  return Output.json('{"waited":' + (waited == null ? "true" : "false") +
    ',"event_error":' + (evErr == null ? "null" : quote(evErr)) + "}");
});

registerTool("crash", "Abort.", "", "read", false, 0, (c: Call): Output => {
  const items = c.input.get("items");
  const arr = items == null ? new Array<Json>() : items.items();
  return Output.text(arr[5].text); // out of range: aborts
});

registerValidator("even", "An even count.", `{"type":"object","required":["count"]}`, (d: Json, v: Validation): void => {
  const n = d.getInt("count", -1);
  if (n < 0) v.fail("count must be a non-negative integer");
  else if (n % 2 != 0) v.invalid("/count", "must be even");
  else v.setValue('{"count":' + n.toString() + ',"half":' + (n / 2).toString() + "}");
});

registerPolicy("by_agent", "Deny the intern.", (r: PolicyRequest): Decision => {
  if (r.agent == "intern") return Decision.deny("interns may not call " + r.tool);
  if (r.effect == "external") return Decision.requireApproval("external", r.tool + " " + r.input.text);
  return Decision.allow("fine");
});
