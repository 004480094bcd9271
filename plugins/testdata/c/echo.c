/*
 * echo.c — one tool, echo, that answers its input object as it came, with
 * the C kit: the benchmarks' plugin whose own work is next to nothing, so
 * that a call's time is the runtime's.
 */
#include "agentic.h"

static int echo(const agentic_call *call, agentic_buf *out) {
    agentic_buf_append(out, call->input.ptr, call->input.len);
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "echo", .description = "Answers its input.", .effect = "read", .idempotent = true, .handler = echo},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
