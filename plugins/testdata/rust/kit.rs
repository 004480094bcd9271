// kit.rs — a test plugin exercising the Rust kit: the host functions, the
// JSON parser and writer, errors and panics, a validator and a policy.
// Built with --cfg needs it says it needs the key-value store; with
// --cfg mistakes its registration is wrong three ways.

#[path = "../../../pdk/rust/agentic.rs"]
mod agentic;

use agentic::{
    config, http_request, idempotency_key, kv_delete, kv_get, kv_set, log, parse, wait_event, wait_for, Call, Decision,
    Effect, Error, Level, Plugin, Policy, PolicyRequest, Request, Tool, Validation, Validator, Value,
};
use std::time::Duration;

pub fn plugin() -> Plugin {
    let p = Plugin::new()
        .tool(
            Tool::new("remember", "Store a note, read it back, fetch a URL.", Effect::Write)
                .input_schema(
                    r#"{"type":"object","properties":{"note":{"type":"string"},"url":{"type":"string"}},"required":["note"]}"#,
                )
                .at_most_once(true)
                .timeout(Duration::from_secs(5)),
            remember,
        )
        .tool(
            Tool::new("json_echo", "Parse text as JSON and write it back.", Effect::Read).idempotent(true),
            json_echo,
        )
        .tool(Tool::new("fail", "Fail with a message.", Effect::Read), |c: &Call| {
            Err(Error::new(format!("failed on purpose for {}", c.tenant)))
        })
        .tool(Tool::new("boom", "Panic.", Effect::Read), boom)
        .tool(Tool::new("waits", "Wait outside a durable call.", Effect::Read), waits)
        .tool(Tool::new("size", "Count the input's members.", Effect::Read), |c: &Call| {
            // Benchmarks: the kit's cost (the envelope parsed, an answer written).
            Ok(Value::object().with("members", c.input.as_object().map(Vec::len)))
        })
        .validator(Validator::new("even", "An even count.").schema(r#"{"type":"object","required":["count"]}"#), even)
        .policy(Policy::new("by_agent", "Deny the intern."), by_agent);
    #[cfg(needs)]
    let p = p.needs(r#"{"kv":true}"#);
    #[cfg(mistakes)]
    let p = p
        .tool(Tool::new("bad name", "", Effect::Read), boom)
        .tool(Tool::new("boom", "again", Effect::Read), boom)
        .validator(Validator::new("loose", "").schema("{nope"), even);
    p
}

fn remember(c: &Call) -> Result<Value, Error> {
    let note = c.input["note"].as_str().ok_or("note is required")?;
    log(Level::Info, &format!("remembering for {} in call {}", c.tenant, c.id));
    kv_set("note", note.as_bytes())?;
    let got = kv_get("note")?;
    let missing = kv_get("missing")?;
    kv_delete("note")?;
    let after = kv_get("note")?;
    let mut out = Value::object()
        .with("value", got.map(|v| String::from_utf8_lossy(&v).into_owned()))
        .with("missing", missing.is_none())
        .with("deleted", after.is_none())
        .with("greeting", config("greeting"))
        .with("unset", config("unset"))
        .with("key", idempotency_key());
    if let Some(url) = c.input["url"].as_str() {
        let res = http_request(&Request::get(url).header("X-Plugin", "rust"))?;
        out.insert(
            "get",
            Value::object()
                .with("status", res.status)
                .with("body", res.text())
                .with("content_type", res.header("Content-Type")),
        );
        // A body that is not UTF-8 goes out and comes back as base64.
        let binary: Vec<u8> = vec![0xff, 0x00, 0xfe, b'a', 0x80];
        let res = http_request(&Request::post(url, &binary))?;
        out.insert("binary_status", res.status);
        out.insert("binary_echoed", res.body == binary);
    }
    Ok(out)
}

fn json_echo(c: &Call) -> Result<Value, Error> {
    let text = c.input["text"].as_str().ok_or("text is required")?;
    let v = parse(text)?;
    let again = parse(&v.to_json())?;
    Ok(Value::object()
        .with("value", v.clone())
        .with("text", v.to_json())
        .with("stable", again == v)
        .with("input", c.input.clone())
        .with("int", v["int"].as_i64())
        .with("float", v["float"].as_f64())
        .with("nested", v["a"]["b"][1].clone())
        .with(
            "made",
            Value::object()
                .with("f", 1.5)
                .with("nan", f64::NAN)
                .with("big", u64::MAX)
                .with("neg", -7),
        ))
}

fn boom(c: &Call) -> Result<Value, Error> {
    let items: Vec<u8> = Vec::new();
    Ok(Value::from(items[c.input["i"].as_i64().unwrap_or(5) as usize]))
}

fn waits(_: &Call) -> Result<Value, Error> {
    let waited = wait_for(Duration::from_millis(1));
    let event = wait_event("order-42-paid");
    let denied = event.as_ref().err().map(Error::is_denied);
    Ok(Value::object()
        .with("waited", waited.is_ok())
        .with("event_error", event.err().map(|e| e.message().to_string()))
        .with("denied", denied))
}

fn even(d: &Value, v: &mut Validation) -> Result<(), Error> {
    let n = d["count"].as_i64().ok_or("count must be an integer")?;
    if n < 0 {
        return Err(Error::new("count must be a non-negative integer"));
    }
    if n % 2 != 0 {
        v.invalid("/count", "must be even");
    } else {
        v.set_value(Value::object().with("count", n).with("half", n / 2));
    }
    Ok(())
}

fn by_agent(r: &PolicyRequest) -> Result<Decision, Error> {
    if r.agent == "intern" {
        return Ok(Decision::deny(&format!("interns may not call {}", r.tool)));
    }
    if r.effect == "external" {
        return Ok(Decision::require_approval(
            "external",
            &format!("{} {}", r.tool, r.input),
        ));
    }
    Ok(Decision::allow("fine"))
}
