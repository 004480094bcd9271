/*
 * version.c — a test plugin built with the C kit in several versions
 * (-DVERSION='"A"'): its tool reports the version that answered
 * (-DTRAP_VERSION: it traps instead).
 */
#include "agentic.h"

#ifndef VERSION
#define VERSION "A"
#endif

volatile unsigned work;

static int version(const agentic_call *c, agentic_buf *out) {
    (void)c;
#ifdef TRAP_VERSION
    __builtin_trap(); /* a version whose tool always traps */
#endif
    /* a little work, so that calls overlap swaps */
    for (unsigned i = 0; i < 20000; i++) work += i;
    agentic_buf_puts(out, "{\"version\":\"" VERSION "\"}");
    return AGENTIC_OK;
}

/* size reports the length of its input (benchmarks: the kit's cost). */
static int size(const agentic_call *c, agentic_buf *out) {
    agentic_buf_puts(out, "{\"bytes\":");
    agentic_buf_int(out, (long long)c->input.len);
    agentic_buf_puts(out, "}");
    return AGENTIC_OK;
}

/* slow spins for about input.n million iterations, then reports. */
static int slow(const agentic_call *c, agentic_buf *out) {
    long long n = 0;
    agentic_json_get_int(c->input, "n", &n);
    for (long long i = 0; i < n * 1000000; i++) work += (unsigned)i;
    agentic_buf_puts(out, "{\"version\":\"" VERSION "\"}");
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "size", .description = "Report the input's length.", .effect = "read", .handler = size},
    {.name = "slow", .description = "Spin, then report the version.", .effect = "read", .handler = slow},
    {.name = "version", .description = "Report the plugin's version.", .effect = "read", .idempotent = true, .handler = version},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
