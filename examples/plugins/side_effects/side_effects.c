/*
 * side_effects — an example approval policy in C (with the kit in pdk/c):
 * it decides by a tool's declared effect.
 *
 *   read     → allow: looking is harmless
 *   write    → allow: it changes only state the host owns (and records)
 *   external → require_approval: it changes the world outside the host;
 *              the summary tells the approver what would happen
 *   anything else → deny
 */
#include "agentic.h"

#include <stdlib.h>
#include <string.h>

/* summary is "TOOL with INPUT", the input cut to fit an approval prompt. */
static char *summary(const agentic_policy_request *r) {
    agentic_buf b = {0};
    agentic_buf_puts(&b, r->tool ? r->tool : "(unnamed tool)");
    agentic_buf_puts(&b, " with ");
    size_t max = 300;
    if (r->input.len > max) {
        agentic_buf_append(&b, r->input.ptr, max);
        agentic_buf_puts(&b, "…");
    } else {
        agentic_buf_append(&b, r->input.ptr, r->input.len);
    }
    return b.ptr;
}

/* the last summary, kept until the next decision (the kit copies it into
 * its answer before the export returns) */
static char *last_summary;

static int decide(const agentic_policy_request *r, agentic_decision *d) {
    free(last_summary);
    last_summary = NULL;
    const char *effect = r->effect ? r->effect : "";
    if (strcmp(effect, "read") == 0) {
        d->decision = "allow";
        d->reason = "read-only tools are harmless";
    } else if (strcmp(effect, "write") == 0) {
        d->decision = "allow";
        d->reason = "the tool changes only state the host owns";
    } else if (strcmp(effect, "external") == 0) {
        d->decision = "require_approval";
        d->reason = "the tool changes the world outside the host";
        d->summary = last_summary = summary(r);
    } else {
        d->decision = "deny";
        d->reason = "the tool declares no known effect";
    }
    return AGENTIC_OK;
}

static const agentic_policy policies[] = {
    {.name = "side_effects",
     .description = "Allow reads and host-owned writes; require approval for external effects; deny the rest.",
     .handler = decide},
};

AGENTIC_PLUGIN(NULL, 0, NULL, 0, policies, AGENTIC_COUNT(policies));
