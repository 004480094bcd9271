/*
 * reflect.c — a test plugin built with the C kit that hands back what the
 * host answers its HTTP requests, as a plugin after a secret the host adds
 * to its requests would:
 *
 *   http   sends its input as the request (http_request's JSON: method,
 *          url, headers, body) and answers the host's answer as it came:
 *          status, every header, the body.
 *   cat    sends each request of its input's "requests" in turn and joins
 *          the bodies of the answers (an answer without a body adds its
 *          error); with "as": "log" it logs the joined text (with
 *          "extism_log", through Extism's own log_info) and answers
 *          its length, with "as": "error" it fails with it, else it
 *          answers it.
 */
#include <stdlib.h>
#include <string.h>

#include "agentic.h"

/* Extism's own log function, which the host's logger receives when
 * Extism's log level lets it (extism.SetLogLevel). */
AGENTIC_EXTISM_IMPORT("log_info") void extism_log_info(extism_ptr offset);

static void extism_log_info_text(const char *text) {
    size_t n = strlen(text);
    extism_ptr off = extism_alloc(n);
    for (size_t i = 0; i < n; i++) extism_store_u8(off + i, (uint8_t)text[i]);
    extism_log_info(off);
}

static int http(const agentic_call *c, agentic_buf *out) {
    agentic_buf req = {0};
    agentic_buf_append(&req, c->input.ptr, c->input.len);
    agentic_buf_append(&req, "", 1); /* NUL */
    size_t len = 0;
    char *res = agentic_http(req.ptr, &len);
    agentic_buf_free(&req);
    agentic_buf_append(out, res, len);
    free(res);
    return AGENTIC_OK;
}

static int cat(const agentic_call *c, agentic_buf *out) {
    agentic_str requests;
    if (!agentic_json_get(c->input, "requests", &requests) || agentic_json_kind(requests) != '[') {
        agentic_buf_puts(out, "cat needs requests");
        return AGENTIC_ERROR;
    }
    agentic_buf joined = {0};
    size_t cursor = 0;
    agentic_str elem;
    while (agentic_json_array_next(requests, &cursor, &elem)) {
        agentic_buf req = {0};
        agentic_buf_append(&req, elem.ptr, elem.len);
        agentic_buf_append(&req, "", 1);
        size_t len = 0;
        char *res = agentic_http(req.ptr, &len);
        agentic_buf_free(&req);
        agentic_str answer = {res, len};
        char *body = agentic_json_get_string(answer, "body");
        if (!body) body = agentic_json_get_string(answer, "error");
        if (body) {
            agentic_buf_puts(&joined, body);
            free(body);
        }
        free(res);
    }
    agentic_buf_append(&joined, "", 1);
    char *as = agentic_json_get_string(c->input, "as");
    int rc = AGENTIC_OK;
    if (as && strcmp(as, "log") == 0) {
        agentic_log(1, joined.ptr);
        agentic_buf_int(out, (long long)strlen(joined.ptr));
    } else if (as && strcmp(as, "extism_log") == 0) {
        extism_log_info_text(joined.ptr);
        agentic_buf_int(out, (long long)strlen(joined.ptr));
    } else if (as && strcmp(as, "error") == 0) {
        agentic_buf_puts(out, joined.ptr);
        rc = AGENTIC_ERROR;
    } else {
        agentic_buf_json_cstring(out, joined.ptr);
    }
    free(as);
    agentic_buf_free(&joined);
    return rc;
}

static const agentic_tool tools[] = {
    {.name = "http", .description = "Sends a request, answers the host's answer.", .effect = "external", .handler = http},
    {.name = "cat", .description = "Sends requests, joins their bodies.", .effect = "external", .handler = cat},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
