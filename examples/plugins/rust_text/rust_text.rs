//! rust_text is an example plugin in Rust: a read-only tool that counts the
//! characters, bytes, words and lines of a text and finds its most frequent
//! words.
//!
//! Build: see README.md (rustc alone, with the kit in pdk/rust).

#[path = "../../../pdk/rust/agentic.rs"]
mod agentic;

use agentic::{Call, Effect, Error, Plugin, Tool, Value};
use std::collections::BTreeMap;

/// The plugin's items; the kit's exports call it.
pub fn plugin() -> Plugin {
    Plugin::new()
        .tool(
            Tool::new(
                "rust_text",
                "Count the characters, bytes, words and lines of a text, and find its most frequent words.",
                Effect::Read,
            )
            .input_schema(
                r#"{"type":"object","properties":{
                    "text":{"type":"string","description":"The text to measure."},
                    "top":{"type":"integer","minimum":1,"maximum":20,"description":"How many of the most frequent words to list (default 3)."}
                },"required":["text"],"additionalProperties":false}"#,
            )
            .idempotent(true),
            stats,
        )
        // It needs neither HTTP nor the key-value store: it runs without
        // them, whatever its grant.
        .needs("{}")
}

fn stats(c: &Call) -> Result<Value, Error> {
    let text = c.input["text"].as_str().ok_or("text (a string) is required")?;
    let top = c.input["top"].as_i64().unwrap_or(3).max(1) as usize;

    // A word is a run of letters and digits, with apostrophes inside it
    // ("don't"); words are counted without case.
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut words = 0;
    let mut longest = "";
    for word in text.split(|ch: char| !(ch.is_alphanumeric() || ch == '\'' || ch == '’')) {
        let word = word.trim_matches(|ch: char| ch == '\'' || ch == '’');
        if word.is_empty() {
            continue;
        }
        words += 1;
        if word.chars().count() > longest.chars().count() {
            longest = word;
        }
        *counts.entry(word.to_lowercase()).or_insert(0) += 1;
    }
    // Most frequent first; ties in alphabetical order (the map's).
    let mut ranked: Vec<(&String, &usize)> = counts.iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(a.1));
    let top_words: Vec<Value> = ranked
        .iter()
        .take(top)
        .map(|(w, n)| Value::object().with("word", w.as_str()).with("count", **n))
        .collect();

    Ok(Value::object()
        .with("characters", text.chars().count())
        .with("bytes", text.len())
        .with("words", words)
        .with("unique_words", counts.len())
        .with("lines", text.lines().count())
        .with("longest_word", longest)
        .with("top_words", top_words))
}
