/*
 * kitcalls.c — a test plugin of the C kit's idempotency key and waits:
 *
 *   keyed  reads the key the host puts on the call's next request, then
 *          sends its input's "url" a GET, and answers the key and the
 *          answer's body: {"key": "...", "body": "..."}.
 *   waits  waits a millisecond, then for the event "order-42-paid", and
 *          answers {"waited": true|false, "event_error": "..."|null}.
 */
#include <stdlib.h>
#include <string.h>

#include "agentic.h"

static int keyed(const agentic_call *c, agentic_buf *out) {
    char *key = agentic_idempotency_key();
    char *url = agentic_json_get_string(c->input, "url");
    if (!url) {
        free(key);
        agentic_buf_puts(out, "keyed needs a url");
        return AGENTIC_ERROR;
    }
    agentic_buf req = {0};
    agentic_buf_puts(&req, "{\"url\":");
    agentic_buf_json_cstring(&req, url);
    agentic_buf_puts(&req, "}");
    agentic_buf_append(&req, "", 1);
    size_t len = 0;
    char *res = agentic_http(req.ptr, &len);
    agentic_buf_free(&req);
    agentic_str answer = {res, len};
    char *body = agentic_json_get_string(answer, "body");
    agentic_buf_puts(out, "{\"key\":");
    agentic_buf_json_cstring(out, key ? key : "");
    agentic_buf_puts(out, ",\"body\":");
    agentic_buf_json_cstring(out, body ? body : "");
    agentic_buf_puts(out, "}");
    free(body);
    free(res);
    free(url);
    free(key);
    return AGENTIC_OK;
}

static int waits(const agentic_call *c, agentic_buf *out) {
    (void)c;
    char *waited = agentic_wait_for(1);
    char *payload = NULL, *err = NULL;
    size_t len = 0;
    int rc = agentic_wait_event("order-42-paid", &payload, &len, &err);
    agentic_buf_puts(out, waited ? "{\"waited\":false" : "{\"waited\":true");
    agentic_buf_puts(out, ",\"event_error\":");
    if (rc == 0) {
        agentic_buf_puts(out, "null");
    } else {
        agentic_buf_json_cstring(out, err ? err : "");
    }
    agentic_buf_puts(out, "}");
    free(waited);
    free(payload);
    free(err);
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "keyed", .description = "Sends a GET with the call's idempotency key.", .effect = "external", .handler = keyed},
    {.name = "waits", .description = "Waits outside a durable call.", .effect = "read", .handler = waits},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
