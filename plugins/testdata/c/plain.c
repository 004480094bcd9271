/*
 * plain.c — a plain Extism module (no describe): its exports take and
 * return raw bytes. The tests make tools of it with sidecar manifests.
 */
#include "agentic.h"

#include <string.h>

/* block copies bytes into a new Extism memory block. */
static extism_ptr block(const char *s, size_t n) {
    extism_ptr off = extism_alloc(n);
    for (size_t i = 0; i < n; i++) extism_store_u8(off + i, (uint8_t)s[i]);
    return off;
}

static void out(const char *s, size_t n) { extism_output_set(block(s, n), n); }

/* count_vowels counts the vowels of its input (any bytes). */
__attribute__((export_name("count_vowels"))) int32_t count_vowels(void) {
    size_t n = (size_t)extism_input_length(), count = 0;
    for (size_t i = 0; i < n; i++) {
        char c = (char)extism_input_load_u8(i);
        if (strchr("aeiouAEIOU", c) && c) count++;
    }
    char buf[48] = "{\"count\":";
    size_t len = strlen(buf);
    char digits[24];
    int d = 0;
    do { digits[d++] = (char)('0' + count % 10); count /= 10; } while (count);
    while (d) buf[len++] = digits[--d];
    buf[len++] = '}';
    out(buf, len);
    return 0;
}

/* shout fails through Extism's error_set. */
__attribute__((export_name("shout"))) int32_t shout(void) {
    const char *msg = "shout: no";
    extism_error_set(block(msg, strlen(msg)));
    return 1;
}

/* Extism's own http_request (extism:host/env), which the host denies
 * whatever the tenant's allowed hosts. */
AGENTIC_EXTISM_IMPORT("http_request") extism_ptr extism_http_request(extism_ptr req, extism_ptr body);
AGENTIC_EXTISM_IMPORT("http_status_code") int32_t extism_http_status_code(void);

/* extism_fetch sends its input (Extism's request JSON: url, method) with
 * Extism's own http_request, and answers the status. */
__attribute__((export_name("extism_fetch"))) int32_t extism_fetch(void) {
    size_t n = (size_t)extism_input_length();
    extism_ptr req = extism_alloc(n);
    for (size_t i = 0; i < n; i++) extism_store_u8(req + i, extism_input_load_u8(i));
    extism_http_request(req, 0);
    int32_t status = extism_http_status_code();
    char buf[16];
    int d = 0;
    do { buf[15 - d++] = (char)('0' + status % 10); status /= 10; } while (status && d < 15);
    out(buf + 16 - d, (size_t)d);
    return 0;
}
