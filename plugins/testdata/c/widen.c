/*
 * widen.c — a test plugin built with the C kit in versions that differ in
 * what they offer (held upgrades, plugins/held.go): -DVERSION='"B"' the
 * version it reports, -DDESC, -DEFFECT, -DSCHEMA, -DIDEMPOTENT=1 its
 * report tool's description, effect, input schema and idempotence,
 * -DEXTRA a tool more, -DNO_SECOND its second tool dropped, -DFETCH a
 * tool that sends its input as an HTTP request through the host, and
 * -DNEEDS='"{…}"' what it says it needs of its sandbox.
 */
#include "agentic.h"

#include <stdlib.h>
#include <string.h>

#ifndef VERSION
#define VERSION "A"
#endif
#ifndef DESC
#define DESC "Report the plugin's version."
#endif
#ifndef EFFECT
#define EFFECT "read"
#endif
#ifndef SCHEMA
#define SCHEMA "{\"type\":\"object\"}"
#endif
#ifndef IDEMPOTENT
#define IDEMPOTENT 0
#endif

static int report(const agentic_call *c, agentic_buf *out) {
    (void)c;
    agentic_buf_puts(out, "{\"version\":\"" VERSION "\"}");
    return AGENTIC_OK;
}

#ifdef FETCH
/* fetch sends its input ({"method","url"}) as a request and answers the
 * host's reply, whatever it is. */
static int fetch(const agentic_call *c, agentic_buf *out) {
    char *req = malloc(c->input.len + 1);
    memcpy(req, c->input.ptr, c->input.len);
    req[c->input.len] = 0;
    size_t n;
    char *res = agentic_http(req, &n);
    agentic_buf_puts(out, res ? res : "null");
    return AGENTIC_OK;
}
#endif

#ifdef NEEDS
AGENTIC_NEEDS(NEEDS);
#endif

static const agentic_tool tools[] = {
#ifdef FETCH
    {.name = "fetch", .description = "Send a request.", .effect = "external", .handler = fetch},
#endif
#ifdef EXTRA
    {.name = "extra", .description = "Something new.", .effect = "external", .handler = report},
#endif
    {.name = "report", .description = DESC, .input_schema = SCHEMA, .effect = EFFECT, .idempotent = IDEMPOTENT, .handler = report},
#ifndef NO_SECOND
    {.name = "second", .description = "Report the version, again.", .effect = "read", .handler = report},
#endif
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
