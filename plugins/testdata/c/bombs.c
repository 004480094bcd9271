/*
 * bombs.c — a hostile test plugin in C, for what a Go plugin cannot do (a
 * native stack overflow, a start function) and for floods of what the host
 * reads besides the output (error text, log lines). Each tool is one
 * misbehaviour; "ok" checks that the host still serves.
 */
#include "agentic.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* calls counts the calls an instance served: a fresh instance starts at 0. */
static int calls;

static int ok(const agentic_call *c, agentic_buf *out) {
    (void)c;
    calls++;
    agentic_buf_puts(out, "{\"ok\":true,\"calls\":");
    agentic_buf_int(out, calls);
    agentic_buf_puts(out, "}");
    return AGENTIC_OK;
}

/* recurse overflows the native call stack: the recursion goes through a
 * volatile function pointer, which the compiler cannot turn into a loop,
 * and keeps its values in Wasm locals, not in linear memory. */
static int (*volatile down)(int);

static int deeper(int n) { return down(n + 1) + n; }

static int recurse(const agentic_call *c, agentic_buf *out) {
    (void)c;
    down = deeper;
    agentic_buf_int(out, deeper(0));
    return AGENTIC_OK;
}

/* trap executes an unreachable instruction: the instance is discarded. */
static int trap(const agentic_call *c, agentic_buf *out) {
    (void)c;
    (void)out;
    __builtin_trap();
}

static volatile uint64_t spins;

/* spin loops until the call is interrupted (no timeout of its own: the
 * tenant's CallTimeout or the caller's context ends it). */
static int spin(const agentic_call *c, agentic_buf *out) {
    (void)c;
    (void)out;
    for (;;) spins++;
}

/* big_block fills a new Extism block of n bytes with ch. */
static extism_ptr big_block(size_t n, char ch) {
    extism_ptr off = extism_alloc(n);
    uint64_t word;
    memset(&word, ch, sizeof word);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) extism_store_u64(off + i, word);
    for (; i < n; i++) extism_store_u8(off + i, (uint8_t)ch);
    return off;
}

/* error_bomb sets a 20 MB error of one line through Extism's error_set. */
static int error_bomb(const agentic_call *c, agentic_buf *out) {
    (void)c;
    (void)out;
    extism_error_set(big_block(20u << 20, 'e'));
    return AGENTIC_ERROR;
}

/* error_answer answers {"error": …} with a 900 KB message: under the output
 * limit, far over any sensible error. */
static int error_answer(const agentic_call *c, agentic_buf *out) {
    (void)c;
    for (int i = 0; i < 900 * 1024 / 64; i++)
        agentic_buf_puts(out, "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff");
    return AGENTIC_ERROR;
}

/* error_text sets, through Extism's error_set, an error the plugin words as
 * the runtime's: the input's "text", then "pad" bytes of 'e' on the same
 * line ("wasm error: …", "module is closed", "failed to initialize
 * runtime"…). The host must take it for the plugin's own error, and bound
 * it. */
static int error_text(const agentic_call *c, agentic_buf *out) {
    (void)out;
    char *text = agentic_json_get_string(c->input, "text");
    long long pad = 0;
    agentic_json_get_int(c->input, "pad", &pad);
    size_t n = text ? strlen(text) : 0;
    if (pad < 0 || pad > (64 << 20)) pad = 0;
    extism_ptr off = extism_alloc(n + (size_t)pad);
    for (size_t i = 0; i < n; i++) extism_store_u8(off + i, (uint8_t)text[i]);
    for (size_t i = 0; i < (size_t)pad; i++) extism_store_u8(off + n + i, 'e');
    extism_error_set(off);
    free(text);
    return AGENTIC_ERROR;
}

/* log_empty writes a million empty log lines. */
static int log_empty(const agentic_call *c, agentic_buf *out) {
    (void)c;
    for (int i = 0; i < 1000000; i++) agentic_host_log(1, 0);
    agentic_buf_puts(out, "\"logged\"");
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "ok", .description = "Answer, counting the instance's calls.", .effect = "read", .handler = ok},
    {.name = "trap", .description = "Trap.", .effect = "read", .handler = trap},
    {.name = "spin", .description = "Spin until interrupted.", .effect = "read", .handler = spin},
    {.name = "recurse", .description = "Recurse until the native stack overflows.", .effect = "read", .handler = recurse},
    {.name = "error_bomb", .description = "Set a 20 MB error.", .effect = "read", .handler = error_bomb},
    {.name = "error_answer", .description = "Answer a 900 KB error.", .effect = "read", .handler = error_answer},
    {.name = "log_empty", .description = "Log a million empty lines.", .effect = "read", .handler = log_empty},
    {.name = "error_text", .description = "Set an error worded as the runtime's.", .effect = "read", .handler = error_text},
};

/* policies that never answer: one traps, one spins until interrupted */
static int trap_policy(const agentic_policy_request *r, agentic_decision *d) {
    (void)r;
    (void)d;
    __builtin_trap();
}

static int spin_policy(const agentic_policy_request *r, agentic_decision *d) {
    (void)r;
    (void)d;
    for (;;) spins++;
}

static const agentic_policy policies[] = {
    {.name = "trap", .description = "Trap.", .handler = trap_policy},
    {.name = "spin", .description = "Spin until interrupted.", .handler = spin_policy},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, policies, AGENTIC_COUNT(policies));

/* bomb_after is when the time bomb goes off, in nanoseconds since the
 * epoch. The tests patch these bytes in the built module; as built, the
 * bomb never goes off. */
volatile uint64_t bomb_after = 0x5EED5EED5EED5EEDull;

/* bomb is made the module's start function by the tests: it returns at once
 * until bomb_after, and loops forever from then on, so that instances made
 * after that time never finish instantiating. */
__attribute__((export_name("bomb"))) void bomb(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (now < bomb_after) return;
    for (;;) spins++;
}

/* linger_ns is how long the start function linger spins before it returns,
 * in nanoseconds. The tests patch these bytes in the built module; as
 * built, linger returns at once. */
#define LINGER_UNSET 0x11A6E511A6E511A6ull
volatile uint64_t linger_ns = LINGER_UNSET;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* linger is made the module's start function by the tests: a module that
 * loads, only slowly (every instance spins linger_ns first). */
__attribute__((export_name("linger"))) void linger(void) {
    if (linger_ns == LINGER_UNSET) return;
    uint64_t end = now_ns() + linger_ns;
    while (now_ns() < end) spins++;
}
