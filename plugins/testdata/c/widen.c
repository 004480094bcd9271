/*
 * widen.c — a test plugin built with the C kit in versions that differ in
 * what they offer (held upgrades, plugins/held.go): -DVERSION='"B"' the
 * version it reports, -DDESC, -DEFFECT, -DSCHEMA, -DIDEMPOTENT=1 its
 * report tool's description, effect, input schema and idempotence,
 * -DEXTRA a tool more, -DNO_SECOND its second tool dropped.
 */
#include "agentic.h"

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

static const agentic_tool tools[] = {
#ifdef EXTRA
    {.name = "extra", .description = "Something new.", .effect = "external", .handler = report},
#endif
    {.name = "report", .description = DESC, .input_schema = SCHEMA, .effect = EFFECT, .idempotent = IDEMPOTENT, .handler = report},
#ifndef NO_SECOND
    {.name = "second", .description = "Report the version, again.", .effect = "read", .handler = report},
#endif
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
