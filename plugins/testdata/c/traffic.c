/*
 * traffic.c — a test plugin built with the C kit whose tools talk to the
 * world through the host: HTTP requests and the key-value store, in
 * versions (-DVERSION='"A"', "B", "C") that make the same call differ.
 *
 *   sync   reads the key "count", GETs BASE/item, POSTs a note to
 *          BASE/notes, writes "count" + 1, and answers with what it read.
 *          Version B posts another body; version C GETs BASE/extra first.
 *   flood  makes N key-value reads of its own keys and N GETs of BASE/big
 *          (the host bounds the requests of a call; the record bounds
 *          what it keeps of the rest); with PAD, each GET has a query of
 *          PAD bytes and PAD / 100 headers of long names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentic.h"

#ifndef VERSION
#define VERSION "A"
#endif

/* pad, when set, makes flood's requests heavy: a query of pad bytes and
 * pad / 100 headers with names of 100 bytes. */
static long long pad;

/* get sends a GET to base + path and returns the host's answer (malloc'd). */
static char *get(const char *base, const char *path) {
    agentic_buf req = {0};
    agentic_buf_puts(&req, "{\"method\":\"GET\",\"url\":");
    size_t n = strlen(base) + strlen(path) + 1;
    char *url = malloc(n + (size_t)pad + 8);
    snprintf(url, n, "%s%s", base, path);
    if (pad > 0) {
        strcat(url, "?pad=");
        size_t at = strlen(url);
        memset(url + at, 'x', (size_t)pad);
        url[at + (size_t)pad] = 0;
    }
    agentic_buf_json_cstring(&req, url);
    free(url);
    if (pad > 0) {
        agentic_buf_puts(&req, ",\"headers\":{");
        for (long long i = 0; i < pad / 100; i++) {
            char name[128];
            snprintf(name, sizeof name, "X-Pad-%04lld-", i);
            size_t at = strlen(name);
            memset(name + at, 'h', 100 - at);
            name[100] = 0;
            if (i > 0) agentic_buf_puts(&req, ",");
            agentic_buf_json_cstring(&req, name);
            agentic_buf_puts(&req, ":\"v\"");
        }
        agentic_buf_puts(&req, "}");
    }
    agentic_buf_puts(&req, "}");
    agentic_buf_append(&req, "", 1); /* NUL */
    size_t len = 0;
    char *res = agentic_http(req.ptr, &len);
    agentic_buf_free(&req);
    return res;
}

static int sync_tool(const agentic_call *c, agentic_buf *out) {
    char *base = agentic_json_get_string(c->input, "base");
    if (!base) {
        agentic_buf_puts(out, "sync needs a base URL");
        return AGENTIC_ERROR;
    }
    char *value = NULL, *err = NULL;
    size_t vlen = 0;
    long long count = 0;
    int found = agentic_kv_get("count", &value, &vlen, &err);
    if (found < 0) {
        agentic_buf_puts(out, "reading count: ");
        agentic_buf_puts(out, err);
        return AGENTIC_ERROR;
    }
    if (found == 1) count = atoll(value);
    free(value);

    if (strcmp(VERSION, "C") == 0) free(get(base, "/extra"));
    char *item = get(base, "/item");

    agentic_buf req = {0};
    agentic_buf_puts(&req, "{\"method\":\"POST\",\"url\":");
    size_t n = strlen(base) + 16;
    char *url = malloc(n);
    snprintf(url, n, "%s/notes", base);
    agentic_buf_json_cstring(&req, url);
    free(url);
    agentic_buf_puts(&req, ",\"headers\":{\"Content-Type\":\"application/json\"},\"body\":");
    agentic_buf note = {0};
    agentic_buf_puts(&note, "{\"count\":");
    agentic_buf_int(&note, count);
    agentic_buf_puts(&note, strcmp(VERSION, "B") == 0 ? ",\"note\":\"changed\"}" : ",\"note\":\"hello\"}");
    agentic_buf_json_string(&req, note.ptr, note.len);
    agentic_buf_free(&note);
    agentic_buf_puts(&req, "}");
    agentic_buf_append(&req, "", 1);
    size_t len = 0;
    char *posted = agentic_http(req.ptr, &len);
    agentic_buf_free(&req);

    char num[32];
    snprintf(num, sizeof num, "%lld", count + 1);
    char *serr = agentic_kv_set("count", num, strlen(num));
    if (serr) {
        agentic_buf_puts(out, "writing count: ");
        agentic_buf_puts(out, serr);
        return AGENTIC_ERROR;
    }
    agentic_buf_puts(out, "{\"count\":");
    agentic_buf_int(out, count);
    agentic_buf_puts(out, ",\"item\":");
    agentic_buf_puts(out, item ? item : "null");
    agentic_buf_puts(out, ",\"posted\":");
    agentic_buf_puts(out, posted ? posted : "null");
    agentic_buf_puts(out, "}");
    free(item);
    free(posted);
    free(base);
    return AGENTIC_OK;
}

static int flood(const agentic_call *c, agentic_buf *out) {
    char *base = agentic_json_get_string(c->input, "base");
    long long n = 0;
    agentic_json_get_int(c->input, "n", &n);
    pad = 0;
    agentic_json_get_int(c->input, "pad", &pad);
    long long answered = 0, errors = 0;
    for (long long i = 0; i < n; i++) {
        char key[32], *value = NULL, *err = NULL;
        size_t vlen = 0;
        snprintf(key, sizeof key, "flood/%lld", i % 7);
        if (agentic_kv_get(key, &value, &vlen, &err) < 0) free(err);
        free(value);
        if (base) {
            char *res = get(base, "/big");
            if (res && strstr(res, "\"error\"") == res + 1) errors++;
            else answered++;
            free(res);
        }
    }
    agentic_buf_puts(out, "{\"answered\":");
    agentic_buf_int(out, answered);
    agentic_buf_puts(out, ",\"errors\":");
    agentic_buf_int(out, errors);
    agentic_buf_puts(out, "}");
    free(base);
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "flood", .description = "Read and fetch over and over.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"base\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"pad\":{\"type\":\"integer\"}},\"required\":[\"n\"]}",
     .effect = "read", .handler = flood},
    {.name = "sync", .description = "Read a counter, fetch an item, post a note, write the counter.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"base\":{\"type\":\"string\"}},\"required\":[\"base\"]}",
     .effect = "external", .handler = sync_tool},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
