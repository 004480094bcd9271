/*
 * agentic.h — the C kit for agentic-host plugins.
 *
 * A plugin lists its tools, validators and policies in a table and writes
 * one handler per item; the kit (agentic.c) provides the exports the host
 * calls (describe, call, validate, decide), reads the JSON envelope and
 * writes the answer. Handlers see decoded fields and the raw JSON of their
 * input, and write their output through a small buffer API.
 *
 *     #include "agentic.h"
 *
 *     static int hello(const agentic_call *c, agentic_buf *out) {
 *         agentic_buf_puts(out, "\"hello\"");      // the output, as JSON
 *         return AGENTIC_OK;
 *     }
 *     static const agentic_tool tools[] = {
 *         {.name = "hello", .description = "Say hello.", .effect = "read", .handler = hello},
 *     };
 *     AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
 *
 * Build (Debian: apt-get install clang lld wasi-libc):
 *
 *     clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *           -nodefaultlibs -I pdk/c -o plugin.wasm plugin.c pdk/c/agentic.c -lc
 *
 * Memory the kit hands to a handler lives until the export returns.
 */
#ifndef AGENTIC_H
#define AGENTIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin ABI version this kit speaks (reported by describe). */
#define AGENTIC_ABI "1.1"

/* ---- Extism's kernel (extism:host/env) ---------------------------------- */

typedef uint64_t extism_ptr;

#define AGENTIC_EXTISM_IMPORT(name) __attribute__((import_module("extism:host/env"), import_name(name)))
AGENTIC_EXTISM_IMPORT("input_length") uint64_t extism_input_length(void);
AGENTIC_EXTISM_IMPORT("input_load_u8") uint8_t extism_input_load_u8(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("input_load_u64") uint64_t extism_input_load_u64(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("alloc") extism_ptr extism_alloc(uint64_t length);
AGENTIC_EXTISM_IMPORT("free") void extism_free(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("length") uint64_t extism_length(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("store_u8") void extism_store_u8(extism_ptr offset, uint8_t value);
AGENTIC_EXTISM_IMPORT("store_u64") void extism_store_u64(extism_ptr offset, uint64_t value);
AGENTIC_EXTISM_IMPORT("load_u8") uint8_t extism_load_u8(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("load_u64") uint64_t extism_load_u64(extism_ptr offset);
AGENTIC_EXTISM_IMPORT("output_set") void extism_output_set(extism_ptr offset, uint64_t length);
AGENTIC_EXTISM_IMPORT("error_set") void extism_error_set(extism_ptr offset);

/* ---- The host's functions (extism:host/user) ---------------------------- */

#define AGENTIC_HOST_IMPORT(name) __attribute__((import_module("extism:host/user"), import_name(name)))
AGENTIC_HOST_IMPORT("log") void agentic_host_log(int32_t level, extism_ptr msg);
AGENTIC_HOST_IMPORT("kv_get") extism_ptr agentic_host_kv_get(extism_ptr key);
AGENTIC_HOST_IMPORT("kv_set") extism_ptr agentic_host_kv_set(extism_ptr key, extism_ptr value);
AGENTIC_HOST_IMPORT("kv_delete") extism_ptr agentic_host_kv_delete(extism_ptr key);
AGENTIC_HOST_IMPORT("http_request") extism_ptr agentic_host_http_request(extism_ptr request);
AGENTIC_HOST_IMPORT("idempotency_key") extism_ptr agentic_host_idempotency_key(void);
AGENTIC_HOST_IMPORT("wait_event") extism_ptr agentic_host_wait_event(extism_ptr key);
AGENTIC_HOST_IMPORT("wait_for") extism_ptr agentic_host_wait_for(int64_t ms);

/* Copy bytes into a new Extism block / read a block into malloc'd memory
 * (NUL-terminated; *len gets the length). */
extism_ptr agentic_block(const void *data, size_t len);
char *agentic_block_read(extism_ptr offset, size_t *len);

/* ---- JSON text ---------------------------------------------------------- */

/* A slice of JSON text (not NUL-terminated). */
typedef struct {
    const char *ptr;
    size_t len;
} agentic_str;

/* agentic_json_get finds member key of the JSON object obj and sets *value
 * to its raw JSON text. False when obj is not an object or has no key. */
bool agentic_json_get(agentic_str obj, const char *key, agentic_str *value);
/* agentic_json_string decodes a JSON string value into a malloc'd,
 * NUL-terminated UTF-8 string; NULL when value is not a string. */
char *agentic_json_string(agentic_str value);
/* agentic_json_get_string is agentic_json_get + agentic_json_string. */
char *agentic_json_get_string(agentic_str obj, const char *key);
/* agentic_json_get_int reads an integer member; false when absent or not
 * an integer. */
bool agentic_json_get_int(agentic_str obj, const char *key, long long *out);
/* agentic_json_array_next walks an array: start with *cursor = 0; each
 * call sets *elem to the next element's raw text. False at the end. */
bool agentic_json_array_next(agentic_str array, size_t *cursor, agentic_str *elem);
/* agentic_json_kind returns the first character of a value: '{', '[', '"',
 * 't', 'f', 'n', or '0' for numbers; 0 for nothing. */
char agentic_json_kind(agentic_str value);

/* A growable byte buffer for output. */
typedef struct {
    char *ptr;
    size_t len, cap;
} agentic_buf;

void agentic_buf_append(agentic_buf *b, const char *data, size_t len);
void agentic_buf_puts(agentic_buf *b, const char *s);
/* Appends s as a quoted, escaped JSON string. */
void agentic_buf_json_string(agentic_buf *b, const char *s, size_t len);
void agentic_buf_json_cstring(agentic_buf *b, const char *s);
void agentic_buf_int(agentic_buf *b, long long v);
void agentic_buf_free(agentic_buf *b);

/* ---- Items and handlers ------------------------------------------------- */

enum { AGENTIC_OK = 0, AGENTIC_ERROR = 1 };

/* One tool call. */
typedef struct {
    const char *tool;       /* the tool's name */
    const char *call_id;    /* idempotency key */
    const char *session_id;
    const char *tenant;
    agentic_str input;      /* the input object, raw JSON */
} agentic_call;

/* A tool handler writes its output (JSON: a string, number, object…) to
 * out and returns AGENTIC_OK, or writes a plain-text message to out and
 * returns AGENTIC_ERROR (the model sees the message). */
typedef int (*agentic_tool_fn)(const agentic_call *call, agentic_buf *out);

typedef struct {
    const char *name;
    const char *description;
    const char *input_schema; /* JSON Schema, an object schema; NULL: {"type":"object"} */
    const char *effect;       /* "read", "write" or "external"; required */
    bool idempotent;
    int timeout_ms;           /* 0: the tenant's limit */
    agentic_tool_fn handler;
    /* No HTTP request of the tool may reach its server twice: a request
     * in flight when the host stopped is not sent again when the call is
     * replayed, and the call ends "outcome unknown". Default (false): it
     * is sent again with the same Idempotency-Key. */
    bool at_most_once;
} agentic_tool;

/* What a validator handler reports. */
typedef struct agentic_validation agentic_validation;
/* Records a problem: path is a JSON Pointer ("" or "/" for the whole
 * deliverable), message plain text. Any problem makes it invalid. */
void agentic_invalid(agentic_validation *v, const char *path, const char *message);
/* Replaces the value returned for a valid deliverable (default: the
 * deliverable as given). json is copied. */
void agentic_set_value(agentic_validation *v, const char *json, size_t len);

/* Reports that the validator itself failed (not that the deliverable is
 * invalid); return AGENTIC_ERROR after it. */
void agentic_fail(agentic_validation *v, const char *message);

/* A validator handler checks the deliverable (raw JSON, already checked
 * against the schema by the host) and returns AGENTIC_OK, having called
 * agentic_invalid for each problem found (none: valid); or AGENTIC_ERROR
 * after agentic_fail when it could not check. */
typedef int (*agentic_validator_fn)(agentic_str deliverable, agentic_validation *v);

typedef struct {
    const char *name;
    const char *description;
    const char *schema; /* JSON Schema of the deliverable; NULL: {} */
    agentic_validator_fn handler;
} agentic_validator;

/* A tool call a policy decides on. */
typedef struct {
    const char *policy;
    const char *tool;   /* the tool's name */
    const char *effect; /* "read", "write" or "external" */
    const char *session_id;
    const char *tenant;
    const char *agent;
    agentic_str input;  /* the call's input, raw JSON */
} agentic_policy_request;

/* A policy's answer. decision is "allow", "require_approval" or "deny";
 * reason and summary are plain text (may be NULL). Strings must stay
 * valid until the handler's export returns (literals, or malloc'd). */
typedef struct {
    const char *decision;
    const char *reason;
    const char *summary;
} agentic_decision;

typedef int (*agentic_policy_fn)(const agentic_policy_request *req, agentic_decision *d);

typedef struct {
    const char *name;
    const char *description;
    agentic_policy_fn handler;
} agentic_policy;

/* The plugin's table; define it once with AGENTIC_PLUGIN. */
typedef struct {
    const agentic_tool *tools;
    size_t n_tools;
    const agentic_validator *validators;
    size_t n_validators;
    const agentic_policy *policies;
    size_t n_policies;
} agentic_plugin;

extern const agentic_plugin agentic_plugin_def;

#define AGENTIC_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define AGENTIC_PLUGIN(tools, n_tools, validators, n_validators, policies, n_policies) \
    const agentic_plugin agentic_plugin_def = {tools, n_tools, validators, n_validators, policies, n_policies}

/* What the plugin needs of its sandbox, as the JSON object describe reports
 * as "needs" (ABI 1.1); optional. A plugin that says runs with what it
 * needs and no more, and is refused where it is granted less:
 *
 *     AGENTIC_NEEDS("{\"allowed_hosts\":[\"api.example.com\"],\"kv\":true}");
 */
extern const char agentic_needs[];
#define AGENTIC_NEEDS(json) const char agentic_needs[] = json

/* ---- Host functions ----------------------------------------------------- */

enum { AGENTIC_LOG_DEBUG = 0, AGENTIC_LOG_INFO = 1, AGENTIC_LOG_WARN = 2, AGENTIC_LOG_ERROR = 3 };
void agentic_log(int level, const char *msg);

/* agentic_kv_get returns 1 and a malloc'd value (*len its length) when key
 * is set, 0 when not, -1 on error (*err a malloc'd message). */
int agentic_kv_get(const char *key, char **value, size_t *len, char **err);
/* agentic_kv_set / agentic_kv_delete return NULL, or a malloc'd error. */
char *agentic_kv_set(const char *key, const void *value, size_t len);
char *agentic_kv_delete(const char *key);

/* agentic_http sends a request through the host (only to the tenant's
 * allowed hosts) and returns the host's JSON answer, malloc'd:
 * {"status":…,"headers":{…},"body":"…"} or {"error":"…"}. request is JSON:
 * {"method":"POST","url":"https://…","headers":{…},"body":"…"}. */
char *agentic_http(const char *request_json, size_t *len);

/* agentic_idempotency_key returns, malloc'd, the Idempotency-Key header
 * the host puts on the call's next agentic_http (unless the request sets
 * its own): derived from the session, the call id and the request's place
 * in the call, the same when the host replays the call after a crash. */
char *agentic_idempotency_key(void);

/* agentic_wait_event waits for the event key to be posted to the call's
 * session and returns 0 with its payload malloc'd (*len its length), or -1
 * with *err a malloc'd message. A durable call (a tool call of a run) holds
 * nothing while it waits: the host ends it there and replays it once the
 * event is posted, when this returns. Elsewhere it fails. */
int agentic_wait_event(const char *key, char **payload, size_t *len, char **err);
/* agentic_wait_for waits ms milliseconds (durably, as agentic_wait_event,
 * in a durable call; in place elsewhere). NULL, or a malloc'd error. */
char *agentic_wait_for(int64_t ms);

#ifdef __cplusplus
}
#endif

#endif /* AGENTIC_H */
