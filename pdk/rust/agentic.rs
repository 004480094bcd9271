//! agentic.rs — the Rust kit for agentic-host plugins.
//!
//! One file on the standard library alone (no crates): the exports the host
//! calls (`describe`, `call`, `validate`, `decide`), the JSON envelope, a
//! small JSON value type with its parser and writer ([`Value`], [`parse`]),
//! and the host's functions ([`log`], [`kv_get`], [`kv_set`], [`kv_delete`],
//! [`http_request`], [`config`], [`idempotency_key`], [`wait_event`],
//! [`wait_for`]).
//!
//! A plugin puts this file beside its source as `agentic.rs`, declares
//! `mod agentic;` and defines `plugin()` at its crate root, which the
//! exports call to learn the plugin's items:
//!
//! ```ignore
//! mod agentic;
//! use agentic::{Call, Effect, Error, Plugin, Tool, Value};
//!
//! pub fn plugin() -> Plugin {
//!     Plugin::new().tool(
//!         Tool::new("hello", "Say hello.", Effect::Read)
//!             .input_schema(r#"{"type":"object","properties":{"name":{"type":"string"}}}"#),
//!         hello,
//!     )
//! }
//!
//! fn hello(c: &Call) -> Result<Value, Error> {
//!     let name = c.input.get("name").and_then(Value::as_str).unwrap_or("stranger");
//!     Ok(Value::from(format!("Hello, {}!", name)))
//! }
//! ```
//!
//! Build with rustc alone (Debian: apt-get install rustc libstd-rust-dev-wasm32 lld):
//!
//! ```sh
//! rustc --edition 2021 --target wasm32-wasi --crate-type cdylib \
//!       -C opt-level=s -C strip=symbols -o hello.wasm hello.rs
//! ```
//!
//! The kit is written for rustc 1.63 (Debian 12's): no language feature newer.

#![allow(dead_code)]

use std::fmt;
use std::time::Duration;

/// The plugin ABI version this kit speaks (reported by describe).
pub const ABI: &str = "1.1";

// ---- Extism's kernel (extism:host/env) -------------------------------------

#[link(wasm_import_module = "extism:host/env")]
extern "C" {
    #[link_name = "input_length"]
    fn extism_input_length() -> u64;
    #[link_name = "input_load_u8"]
    fn extism_input_load_u8(offset: u64) -> u8;
    #[link_name = "input_load_u64"]
    fn extism_input_load_u64(offset: u64) -> u64;
    #[link_name = "alloc"]
    fn extism_alloc(length: u64) -> u64;
    #[link_name = "free"]
    fn extism_free(offset: u64);
    #[link_name = "length"]
    fn extism_length(offset: u64) -> u64;
    #[link_name = "store_u8"]
    fn extism_store_u8(offset: u64, value: u8);
    #[link_name = "store_u64"]
    fn extism_store_u64(offset: u64, value: u64);
    #[link_name = "load_u8"]
    fn extism_load_u8(offset: u64) -> u8;
    #[link_name = "load_u64"]
    fn extism_load_u64(offset: u64) -> u64;
    #[link_name = "output_set"]
    fn extism_output_set(offset: u64, length: u64);
    #[link_name = "config_get"]
    fn extism_config_get(key: u64) -> u64;
}

// ---- The host's functions (extism:host/user) -------------------------------

#[link(wasm_import_module = "extism:host/user")]
extern "C" {
    #[link_name = "log"]
    fn host_log(level: i32, msg: u64);
    #[link_name = "kv_get"]
    fn host_kv_get(key: u64) -> u64;
    #[link_name = "kv_set"]
    fn host_kv_set(key: u64, value: u64) -> u64;
    #[link_name = "kv_delete"]
    fn host_kv_delete(key: u64) -> u64;
    #[link_name = "http_request"]
    fn host_http_request(req: u64) -> u64;
    #[link_name = "idempotency_key"]
    fn host_idempotency_key() -> u64;
    #[link_name = "wait_event"]
    fn host_wait_event(key: u64) -> u64;
    #[link_name = "wait_for"]
    fn host_wait_for(ms: i64) -> u64;
}

/// An Extism memory block holding data; the caller frees it.
fn block(data: &[u8]) -> u64 {
    unsafe {
        let off = extism_alloc(data.len() as u64);
        let mut chunks = data.chunks_exact(8);
        let mut i = 0u64;
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            extism_store_u64(off + i, u64::from_le_bytes(w));
            i += 8;
        }
        for &b in chunks.remainder() {
            extism_store_u8(off + i, b);
            i += 1;
        }
        off
    }
}

/// The bytes of the block at off (0: none), which it frees.
fn take(off: u64) -> Option<Vec<u8>> {
    if off == 0 {
        return None;
    }
    unsafe {
        let n = extism_length(off) as usize;
        let mut out = Vec::with_capacity(n);
        let mut i = 0usize;
        while i + 8 <= n {
            out.extend_from_slice(&extism_load_u64(off + i as u64).to_le_bytes());
            i += 8;
        }
        while i < n {
            out.push(extism_load_u8(off + i as u64));
            i += 1;
        }
        extism_free(off);
        Some(out)
    }
}

fn free(off: u64) {
    unsafe { extism_free(off) }
}

fn read_input() -> Vec<u8> {
    unsafe {
        let n = extism_input_length() as usize;
        let mut out = Vec::with_capacity(n);
        let mut i = 0usize;
        while i + 8 <= n {
            out.extend_from_slice(&extism_input_load_u64(i as u64).to_le_bytes());
            i += 8;
        }
        while i < n {
            out.push(extism_input_load_u8(i as u64));
            i += 1;
        }
        out
    }
}

fn output(data: &[u8]) {
    let off = block(data);
    unsafe { extism_output_set(off, data.len() as u64) }
}

// ---- Errors -----------------------------------------------------------------

/// An error: a handler's failure (the model sees its message), a host
/// function's (the host refused, or the store or the network failed), or
/// JSON that does not parse.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    message: String,
    denied: bool,
}

impl Error {
    /// An error with this message.
    pub fn new<S: Into<String>>(message: S) -> Error {
        Error {
            message: message.into(),
            denied: false,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the host refused (the tenant's limits deny the key-value
    /// store, a host not allowed, a bad key): its message said "denied".
    pub fn is_denied(&self) -> bool {
        self.denied
    }

    /// host is a host function's error message: "denied:" ones are
    /// refusals.
    fn host(function: &str, msg: &[u8]) -> Error {
        let msg = String::from_utf8_lossy(msg);
        let denied = msg.starts_with("denied:");
        Error {
            message: format!("{}: {}", function, msg),
            denied,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error::new(s)
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::new(s)
    }
}

// ---- JSON ---------------------------------------------------------------------

/// A JSON value. Objects keep their members in order; numbers keep their
/// text, so an integer of any size goes through unchanged.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// A JSON number, as its text (valid JSON number syntax).
#[derive(Clone, Debug, PartialEq)]
pub struct Number(String);

impl Number {
    /// The number's JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The number as an i64, when it is an integer in range.
    pub fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }
    /// The number as an f64 (the nearest).
    pub fn as_f64(&self) -> Option<f64> {
        self.0.parse().ok()
    }
}

static NULL: Value = Value::Null;

impl Value {
    /// An empty object, to fill with [`Value::with`].
    pub fn object() -> Value {
        Value::Object(Vec::new())
    }

    /// This object with member key set to value (replacing one of that
    /// name); a value that is not an object becomes one.
    pub fn with<K: Into<String>, V: Into<Value>>(mut self, key: K, value: V) -> Value {
        self.insert(key, value);
        self
    }

    /// Sets member key of this object to value (replacing one of that
    /// name); a value that is not an object becomes one.
    pub fn insert<K: Into<String>, V: Into<Value>>(&mut self, key: K, value: V) {
        let key = key.into();
        let value = value.into();
        if let Value::Object(members) = self {
            for m in members.iter_mut() {
                if m.0 == key {
                    m.1 = value;
                    return;
                }
            }
            members.push((key, value));
            return;
        }
        *self = Value::Object(vec![(key, value)]);
    }

    /// Member key of an object (the last of that name); None when absent
    /// or when this is not an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().rev().find(|m| m.0 == key).map(|m| &m.1),
            _ => None,
        }
    }

    /// Element i of an array; None when out of range or not an array.
    pub fn at(&self, i: usize) -> Option<&Value> {
        match self {
            Value::Array(items) => items.get(i),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.as_i64(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
    pub fn as_object(&self) -> Option<&Vec<(String, Value)>> {
        match self {
            Value::Object(members) => Some(members),
            _ => None,
        }
    }

    /// The value as compact JSON text (also what `to_string` gives).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self);
        out
    }
}

/// `value["key"]`: the member, or null.
impl std::ops::Index<&str> for Value {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&NULL)
    }
}

/// `value[i]`: the element, or null.
impl std::ops::Index<usize> for Value {
    type Output = Value;
    fn index(&self, i: usize) -> &Value {
        self.at(i).unwrap_or(&NULL)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}
impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::String(s.clone())
    }
}
impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Value {
        Value::Array(items)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        match v {
            Some(v) => v.into(),
            None => Value::Null,
        }
    }
}
macro_rules! value_from_int {
    ($($t:ty)*) => {$(
        impl From<$t> for Value {
            fn from(n: $t) -> Value { Value::Number(Number(n.to_string())) }
        }
    )*};
}
value_from_int!(i8 i16 i32 i64 isize u8 u16 u32 u64 usize);
impl From<f64> for Value {
    /// A finite f64 (NaN and the infinities have no JSON: null).
    fn from(n: f64) -> Value {
        if !n.is_finite() {
            return Value::Null;
        }
        Value::Number(Number(format!("{}", n)))
    }
}
impl From<f32> for Value {
    fn from(n: f32) -> Value {
        Value::from(n as f64)
    }
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.0),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (k, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Appends s as a quoted JSON string: `"` `\` and control characters
/// escaped, everything else as UTF-8.
pub fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 15] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// quote returns s as a quoted JSON string.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// How deep arrays and objects may nest in what [`parse`] reads.
pub const MAX_DEPTH: usize = 128;

/// parse reads one JSON value (RFC 8259; whitespace around it, nothing
/// else). Strings' escapes are decoded, a lone surrogate becoming U+FFFD.
pub fn parse(text: &str) -> Result<Value, Error> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("unexpected text after the value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, what: &str) -> Error {
        Error::new(format!("json: {} at offset {}", what, self.i))
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, Error> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// value reads a value inside depth arrays and objects.
    fn value(&mut self, depth: usize) -> Result<Value, Error> {
        if depth >= MAX_DEPTH && matches!(self.peek(), Some(b'[') | Some(b'{')) {
            return Err(self.err("nested too deeply"));
        }
        match self.peek() {
            None => Err(self.err("unexpected end")),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return Err(self.err("expected , or ]")),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(Value::Object(members));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a member name"));
                    }
                    let key = self.string()?;
                    self.ws();
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected :"));
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    members.push((key, v));
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(members));
                        }
                        _ => return Err(self.err("expected , or }")),
                    }
                }
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Value, Error> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(c) if c.is_ascii_digit() => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if matches!(self.peek(), Some(b'e') | Some(b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+') | Some(b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        // The bytes are ASCII: the slice is valid UTF-8.
        let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        Ok(Value::Number(Number(text)))
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        if self.i + 4 > self.s.len() {
            return Err(self.err("short \\u escape"));
        }
        let mut v = 0u32;
        for k in 0..4 {
            let d = match self.s[self.i + k] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.err("bad \\u escape")),
            };
            v = v << 4 | d as u32;
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, Error> {
        self.i += 1; // the opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i] != b'"' && self.s[self.i] != b'\\' && self.s[self.i] >= 0x20 {
                self.i += 1;
            }
            out.extend_from_slice(&self.s[start..self.i]);
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    // The input is a &str and escapes write UTF-8: valid.
                    return String::from_utf8(out).map_err(|_| self.err("invalid UTF-8"));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.peek() {
                        Some(c) => c,
                        None => return Err(self.err("unterminated string")),
                    };
                    self.i += 1;
                    let ch = match c {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.s[self.i..].starts_with(b"\\u") {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                } else {
                                    self.i = save;
                                }
                            }
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err("bad escape"));
                        }
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
}

// ---- Base64 (HTTP bodies that are not UTF-8) -------------------------------------

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity((data.len() + 2) / 3 * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        out.push(B64[(n >> 18) as usize & 63] as char);
        out.push(B64[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            B64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 { B64[n as usize & 63] as char } else { '=' });
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = B64.iter().position(|&b| b == c)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

// ---- Items and handlers -------------------------------------------------------------

/// What a tool does to the world: the host records an external call's
/// intent before it runs, and re-runs it after a crash only when it is
/// idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// It only reads; re-running it is harmless.
    Read,
    /// It changes state the host owns.
    Write,
    /// It changes the world outside: sends, publishes, pays.
    External,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::External => "external",
        }
    }
}

/// A tool's description.
#[derive(Clone, Debug)]
pub struct Tool {
    name: String,
    description: String,
    effect: Effect,
    input_schema: Option<String>,
    idempotent: bool,
    at_most_once: bool,
    timeout_ms: u64,
}

impl Tool {
    /// A tool: its name (1 to 64 characters of [A-Za-z0-9_-]), what it
    /// does (the model reads it) and its effect.
    pub fn new(name: &str, description: &str, effect: Effect) -> Tool {
        Tool {
            name: name.to_string(),
            description: description.to_string(),
            effect,
            input_schema: None,
            idempotent: false,
            at_most_once: false,
            timeout_ms: 0,
        }
    }
    /// The JSON Schema of its input, an object schema. Default:
    /// `{"type":"object"}`.
    pub fn input_schema(mut self, schema: &str) -> Tool {
        self.input_schema = Some(schema.to_string());
        self
    }
    /// Whether running it twice with the same call id is the same as once
    /// (the call id is its idempotency key). Default: false.
    pub fn idempotent(mut self, yes: bool) -> Tool {
        self.idempotent = yes;
        self
    }
    /// No HTTP request of the tool may reach its server twice: a request in
    /// flight when the host stopped is not sent again when the call is
    /// replayed, and the call ends "outcome unknown". Default: false, it is
    /// sent again with the same Idempotency-Key.
    pub fn at_most_once(mut self, yes: bool) -> Tool {
        self.at_most_once = yes;
        self
    }
    /// Shortens the tenant's call timeout for this tool (never lengthens
    /// it); whole milliseconds. Default: the tenant's.
    pub fn timeout(mut self, d: Duration) -> Tool {
        self.timeout_ms = d.as_millis() as u64;
        self
    }
}

/// A deliverable validator's description.
#[derive(Clone, Debug)]
pub struct Validator {
    name: String,
    description: String,
    schema: Option<String>,
}

impl Validator {
    pub fn new(name: &str, description: &str) -> Validator {
        Validator {
            name: name.to_string(),
            description: description.to_string(),
            schema: None,
        }
    }
    /// The JSON Schema of the deliverable, which the host checks first.
    /// Default: `{}`.
    pub fn schema(mut self, schema: &str) -> Validator {
        self.schema = Some(schema.to_string());
        self
    }
}

/// An approval policy's description.
#[derive(Clone, Debug)]
pub struct Policy {
    name: String,
    description: String,
}

impl Policy {
    pub fn new(name: &str, description: &str) -> Policy {
        Policy {
            name: name.to_string(),
            description: description.to_string(),
        }
    }
}

/// One tool call.
#[derive(Clone, Debug)]
pub struct Call {
    /// The tool's name.
    pub tool: String,
    /// The call's id: the idempotency key of an idempotent tool.
    pub id: String,
    pub session_id: String,
    pub tenant: String,
    /// The input, already checked against the tool's schema by the host.
    pub input: Value,
}

/// What a validator handler reports.
#[derive(Debug, Default)]
pub struct Validation {
    problems: Vec<String>,
    value: Option<Value>,
}

impl Validation {
    /// Records a problem: path is a JSON Pointer ("" or "/" for the whole
    /// deliverable), message plain text. Any problem makes it invalid.
    pub fn invalid(&mut self, path: &str, message: &str) {
        let path = if path.is_empty() { "/" } else { path };
        self.problems.push(format!("{}: {}", path, message));
    }
    /// Replaces the value returned for a valid deliverable (default: the
    /// deliverable as given).
    pub fn set_value<V: Into<Value>>(&mut self, value: V) {
        self.value = Some(value.into());
    }
}

/// A tool call a policy decides on.
#[derive(Clone, Debug)]
pub struct PolicyRequest {
    pub policy: String,
    /// The tool's name.
    pub tool: String,
    /// Its effect: "read", "write" or "external".
    pub effect: String,
    pub session_id: String,
    pub tenant: String,
    pub agent: String,
    /// The call's input.
    pub input: Value,
}

/// A policy's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    decision: &'static str,
    reason: String,
    summary: String,
}

impl Decision {
    pub fn allow(reason: &str) -> Decision {
        Decision {
            decision: "allow",
            reason: reason.to_string(),
            summary: String::new(),
        }
    }
    /// Ask a person; summary says what is asked of them.
    pub fn require_approval(reason: &str, summary: &str) -> Decision {
        Decision {
            decision: "require_approval",
            reason: reason.to_string(),
            summary: summary.to_string(),
        }
    }
    pub fn deny(reason: &str) -> Decision {
        Decision {
            decision: "deny",
            reason: reason.to_string(),
            summary: String::new(),
        }
    }
}

type ToolFn = Box<dyn Fn(&Call) -> Result<Value, Error>>;
type ValidatorFn = Box<dyn Fn(&Value, &mut Validation) -> Result<(), Error>>;
type PolicyFn = Box<dyn Fn(&PolicyRequest) -> Result<Decision, Error>>;

/// A plugin's items and their handlers; the crate's `plugin()` returns it.
#[derive(Default)]
pub struct Plugin {
    tools: Vec<(Tool, ToolFn)>,
    validators: Vec<(Validator, ValidatorFn)>,
    policies: Vec<(Policy, PolicyFn)>,
    needs: Option<String>,
}

impl Plugin {
    pub fn new() -> Plugin {
        Plugin::default()
    }

    /// Adds a tool. Its handler returns the output (a string reaches the
    /// model as text, anything else as JSON) or an error the model sees.
    pub fn tool<F>(mut self, t: Tool, handler: F) -> Plugin
    where
        F: Fn(&Call) -> Result<Value, Error> + 'static,
    {
        self.tools.push((t, Box::new(handler)));
        self
    }

    /// Adds a deliverable validator. Its handler records problems with
    /// [`Validation::invalid`] (none: valid) and returns Ok, or returns an
    /// error when it could not check.
    pub fn validator<F>(mut self, v: Validator, handler: F) -> Plugin
    where
        F: Fn(&Value, &mut Validation) -> Result<(), Error> + 'static,
    {
        self.validators.push((v, Box::new(handler)));
        self
    }

    /// Adds an approval policy. An error means it could not decide: the
    /// host denies the call.
    pub fn policy<F>(mut self, p: Policy, handler: F) -> Plugin
    where
        F: Fn(&PolicyRequest) -> Result<Decision, Error> + 'static,
    {
        self.policies.push((p, Box::new(handler)));
        self
    }

    /// What the plugin needs of its sandbox, the JSON object describe
    /// reports as "needs" (ABI 1.1): a plugin that says runs with what it
    /// needs and no more, and is refused where it is granted less.
    ///
    /// `.needs(r#"{"allowed_hosts":["api.example.com"],"kv":true}"#)`
    pub fn needs(mut self, json: &str) -> Plugin {
        self.needs = Some(json.to_string());
        self
    }

    /// The registration's mistakes: names, schemas that are not JSON
    /// objects, duplicates.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut check = |kind: &str, name: &str, seen: &mut Vec<String>, schema: Option<&String>| {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if !ok {
                problems.push(format!(
                    "{} name {}: want 1 to 64 characters of [A-Za-z0-9_-]",
                    kind,
                    quote(name)
                ));
            }
            if seen.iter().any(|s| s == name) {
                problems.push(format!("{} {} is registered twice", kind, name));
            }
            seen.push(name.to_string());
            if let Some(s) = schema {
                match parse(s) {
                    Ok(Value::Object(_)) => {}
                    Ok(_) => problems.push(format!("{} {}: the schema is not a JSON object", kind, name)),
                    Err(e) => problems.push(format!("{} {}: the schema is not valid JSON: {}", kind, name, e)),
                }
            }
        };
        let mut seen = Vec::new();
        for (t, _) in &self.tools {
            check("tool", &t.name, &mut seen, t.input_schema.as_ref());
        }
        let mut seen = Vec::new();
        for (v, _) in &self.validators {
            check("validator", &v.name, &mut seen, v.schema.as_ref());
        }
        let mut seen = Vec::new();
        for (p, _) in &self.policies {
            check("policy", &p.name, &mut seen, None);
        }
        if let Some(n) = &self.needs {
            match parse(n) {
                Ok(Value::Object(_)) => {}
                _ => problems.push("needs: not a JSON object".to_string()),
            }
        }
        problems
    }
}

// ---- Exports -------------------------------------------------------------------

fn answer(v: Value) -> i32 {
    output(v.to_json().as_bytes());
    0
}

fn answer_error(msg: &str) -> i32 {
    answer(Value::object().with("error", msg))
}

fn install_panic_hook() {
    static mut INSTALLED: bool = false;
    // An instance runs one export at a time: no other thread reads it.
    unsafe {
        if INSTALLED {
            return;
        }
        INSTALLED = true;
    }
    std::panic::set_hook(Box::new(|info| {
        log(Level::Error, &format!("panic: {}", info));
    }));
}

/// The export's input, parsed; Err answers the host.
fn request() -> Result<Value, i32> {
    install_panic_hook();
    let raw = read_input();
    let text = match std::str::from_utf8(&raw) {
        Ok(t) => t,
        Err(_) => return Err(answer_error("agentic.rs: the input is not UTF-8")),
    };
    match parse(text) {
        Ok(v) => Ok(v),
        Err(e) => Err(answer_error(&format!("agentic.rs: malformed input: {}", e))),
    }
}

fn string_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

/// Parses JSON the plugin wrote (a schema, needs), already checked by
/// problems().
fn raw(json: &str) -> Value {
    parse(json).unwrap_or(Value::Null)
}

#[no_mangle]
pub extern "C" fn describe() -> i32 {
    install_panic_hook();
    let p = crate::plugin();
    let problems = p.problems();
    if !problems.is_empty() {
        return answer_error(&format!("agentic.rs: {}", problems.join("; ")));
    }
    let mut tools = Vec::new();
    for (t, _) in &p.tools {
        let mut d = Value::object()
            .with("name", t.name.as_str())
            .with("description", t.description.as_str())
            .with(
                "input_schema",
                t.input_schema
                    .as_ref()
                    .map(|s| raw(s))
                    .unwrap_or_else(|| raw(r#"{"type":"object"}"#)),
            )
            .with("effect", t.effect.as_str())
            .with("idempotent", t.idempotent);
        if t.at_most_once {
            d.insert("at_most_once", true);
        }
        d.insert("timeout_ms", t.timeout_ms);
        tools.push(d);
    }
    let mut validators = Vec::new();
    for (v, _) in &p.validators {
        validators.push(
            Value::object()
                .with("name", v.name.as_str())
                .with("description", v.description.as_str())
                .with(
                    "schema",
                    v.schema.as_ref().map(|s| raw(s)).unwrap_or_else(Value::object),
                ),
        );
    }
    let mut policies = Vec::new();
    for (pol, _) in &p.policies {
        policies.push(
            Value::object()
                .with("name", pol.name.as_str())
                .with("description", pol.description.as_str()),
        );
    }
    let mut out = Value::object()
        .with("abi", ABI)
        .with("tools", tools)
        .with("validators", validators)
        .with("policies", policies);
    if let Some(n) = &p.needs {
        out.insert("needs", raw(n));
    }
    answer(out)
}

#[no_mangle]
pub extern "C" fn call() -> i32 {
    let req = match request() {
        Ok(r) => r,
        Err(rc) => return rc,
    };
    let c = Call {
        tool: string_of(&req, "tool"),
        id: string_of(&req, "call_id"),
        session_id: string_of(&req, "session_id"),
        tenant: string_of(&req, "tenant"),
        input: req.get("input").cloned().unwrap_or_else(Value::object),
    };
    let p = crate::plugin();
    for (t, handler) in &p.tools {
        if t.name == c.tool {
            return match handler(&c) {
                Ok(v) => answer(Value::object().with("output", v)),
                Err(e) => answer_error(e.message()),
            };
        }
    }
    answer_error(&format!("agentic.rs: unknown tool {}", quote(&c.tool)))
}

#[no_mangle]
pub extern "C" fn validate() -> i32 {
    let req = match request() {
        Ok(r) => r,
        Err(rc) => return rc,
    };
    let name = string_of(&req, "validator");
    let deliverable = match req.get("deliverable") {
        Some(d) => d.clone(),
        None => return answer_error("agentic.rs: no deliverable"),
    };
    let p = crate::plugin();
    for (v, handler) in &p.validators {
        if v.name == name {
            let mut val = Validation::default();
            if let Err(e) = handler(&deliverable, &mut val) {
                return answer_error(e.message());
            }
            if !val.problems.is_empty() {
                let errors: Vec<Value> = val.problems.into_iter().map(Value::from).collect();
                return answer(Value::object().with("ok", false).with("errors", errors));
            }
            return answer(
                Value::object()
                    .with("ok", true)
                    .with("value", val.value.unwrap_or(deliverable)),
            );
        }
    }
    answer_error(&format!("agentic.rs: unknown validator {}", quote(&name)))
}

#[no_mangle]
pub extern "C" fn decide() -> i32 {
    let req = match request() {
        Ok(r) => r,
        Err(rc) => return rc,
    };
    let r = PolicyRequest {
        policy: string_of(&req, "policy"),
        tool: string_of(&req["tool"], "name"),
        effect: string_of(&req["tool"], "effect"),
        session_id: string_of(&req, "session_id"),
        tenant: string_of(&req, "tenant"),
        agent: string_of(&req, "agent"),
        input: req.get("input").cloned().unwrap_or_else(Value::object),
    };
    let p = crate::plugin();
    for (pol, handler) in &p.policies {
        if pol.name == r.policy {
            return match handler(&r) {
                Ok(d) => answer(
                    Value::object()
                        .with("decision", d.decision)
                        .with("reason", d.reason)
                        .with("summary", d.summary),
                ),
                Err(e) => answer_error(e.message()),
            };
        }
    }
    answer_error(&format!("agentic.rs: unknown policy {}", quote(&r.policy)))
}

// ---- Host functions -------------------------------------------------------------

/// A log line's level; the host maps them onto its slog levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

/// log sends a line to the host's log, tagged with the plugin, tenant and
/// call. The host caps how much one call may log.
pub fn log(level: Level, msg: &str) {
    let off = block(msg.as_bytes());
    unsafe { host_log(level as i32, off) };
    free(off);
}

/// kv_get reads key from the tenant's key-value store: Some(value), or
/// None when the key is not set.
pub fn kv_get(key: &str) -> Result<Option<Vec<u8>>, Error> {
    let k = block(key.as_bytes());
    let res = take(unsafe { host_kv_get(k) }).unwrap_or_default();
    free(k);
    match res.first() {
        Some(0) => Ok(None),
        Some(1) => Ok(Some(res[1..].to_vec())),
        Some(_) => Err(Error::host("kv_get", &res[1..])),
        None => Err(Error::new("kv_get: empty answer from the host")),
    }
}

/// kv_set stores value under key in the tenant's key-value store (all the
/// tenant's plugins share it: prefix your keys).
pub fn kv_set(key: &str, value: &[u8]) -> Result<(), Error> {
    let k = block(key.as_bytes());
    let v = block(value);
    let res = take(unsafe { host_kv_set(k, v) });
    free(k);
    free(v);
    match res {
        None => Ok(()),
        Some(msg) => Err(Error::host("kv_set", &msg)),
    }
}

/// kv_delete removes key; removing a missing key is not an error.
pub fn kv_delete(key: &str) -> Result<(), Error> {
    let k = block(key.as_bytes());
    let res = take(unsafe { host_kv_delete(k) });
    free(k);
    match res {
        None => Ok(()),
        Some(msg) => Err(Error::host("kv_delete", &msg)),
    }
}

/// config returns the plugin's configuration value for key, set by the
/// host for the tenant (endpoints, modes; never secrets); None when unset.
pub fn config(key: &str) -> Option<String> {
    let k = block(key.as_bytes());
    let res = take(unsafe { extism_config_get(k) });
    free(k);
    res.map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// idempotency_key returns the Idempotency-Key header the host puts on the
/// call's next [`http_request`] (unless the request sets its own): derived
/// from the session, the call id and the request's place in the call, the
/// same when the host replays the call after a crash.
pub fn idempotency_key() -> String {
    let res = take(unsafe { host_idempotency_key() }).unwrap_or_default();
    String::from_utf8_lossy(&res).into_owned()
}

/// wait_event waits for the event key to be posted to the call's session
/// and returns its payload. A durable call (a tool call of a run) holds
/// nothing while it waits: the host ends it there and replays it once the
/// event is posted, when this returns. Elsewhere it fails.
pub fn wait_event(key: &str) -> Result<Vec<u8>, Error> {
    let k = block(key.as_bytes());
    let res = take(unsafe { host_wait_event(k) }).unwrap_or_default();
    free(k);
    match res.first() {
        Some(0) => Ok(res[1..].to_vec()),
        Some(_) => Err(Error::host("wait_event", &res[1..])),
        None => Err(Error::new("wait_event: empty answer from the host")),
    }
}

/// wait_for waits d, in whole milliseconds (durably, as [`wait_event`], in
/// a durable call; in place, within the call's deadline, elsewhere).
pub fn wait_for(d: Duration) -> Result<(), Error> {
    let ms = d.as_millis().min(i64::MAX as u128) as i64;
    match take(unsafe { host_wait_for(ms) }) {
        None => Ok(()),
        Some(msg) => Err(Error::host("wait_for", &msg)),
    }
}

/// A request sent through the host.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The method. Default (""): GET.
    pub method: String,
    /// An absolute http or https URL.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The body. Default: none.
    pub body: Option<Vec<u8>>,
}

impl Request {
    pub fn get(url: &str) -> Request {
        Request {
            method: "GET".to_string(),
            url: url.to_string(),
            ..Request::default()
        }
    }
    pub fn post(url: &str, body: &[u8]) -> Request {
        Request {
            method: "POST".to_string(),
            url: url.to_string(),
            body: Some(body.to_vec()),
            ..Request::default()
        }
    }
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// The answer to a [`Request`]: any status is an answer, not an error.
#[derive(Clone, Debug, Default)]
pub struct Response {
    pub status: u16,
    /// The headers (lower-case names, values joined with ", ").
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The header's value (name in any case), if there is one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.0.eq_ignore_ascii_case(name))
            .map(|h| h.1.as_str())
    }
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// http_request sends req through the host, which sends it only to the
/// tenant's allowed hosts, refuses private addresses unless allowed,
/// re-checks every redirect and caps the response's size and time. Errors
/// are the host's refusals ([`Error::is_denied`]) and transport failures.
pub fn http_request(req: &Request) -> Result<Response, Error> {
    let mut w = Value::object().with("url", req.url.as_str());
    if !req.method.is_empty() {
        w.insert("method", req.method.as_str());
    }
    if !req.headers.is_empty() {
        let mut h = Value::object();
        for (k, v) in &req.headers {
            h.insert(k.as_str(), v.as_str());
        }
        w.insert("headers", h);
    }
    if let Some(body) = &req.body {
        match std::str::from_utf8(body) {
            Ok(s) => w.insert("body", s),
            Err(_) => w.insert("body_base64", base64_encode(body)),
        }
    }
    let r = block(w.to_json().as_bytes());
    let res = take(unsafe { host_http_request(r) }).unwrap_or_default();
    free(r);
    let text = String::from_utf8_lossy(&res);
    let ans = match parse(&text) {
        Ok(v) => v,
        Err(e) => {
            return Err(Error::new(format!(
                "http_request: malformed answer from the host: {}",
                e
            )))
        }
    };
    if let Some(msg) = ans.get("error").and_then(Value::as_str) {
        if !msg.is_empty() {
            return Err(Error {
                message: format!("http_request: {}", msg),
                denied: ans.get("denied").and_then(Value::as_bool).unwrap_or(false),
            });
        }
    }
    let mut out = Response {
        status: ans["status"].as_i64().unwrap_or(0) as u16,
        ..Response::default()
    };
    if let Some(members) = ans["headers"].as_object() {
        for (k, v) in members {
            out.headers.push((k.clone(), v.as_str().unwrap_or("").to_string()));
        }
    }
    if let Some(b) = ans["body"].as_str() {
        out.body = b.as_bytes().to_vec();
    } else if let Some(b) = ans["body_base64"].as_str() {
        out.body = match base64_decode(b) {
            Some(d) => d,
            None => return Err(Error::new("http_request: bad body_base64 from the host")),
        };
    }
    Ok(out)
}
