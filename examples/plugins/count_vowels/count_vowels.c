/*
 * count_vowels — an example of a plain Extism plugin: no agentic-host kit,
 * no describe export, just an export that takes raw text and answers JSON,
 * like Extism's own classic example. The sidecar manifest beside it
 * (count_vowels.json) makes it a tool: it names the export, the tool's
 * input schema and effect, and passes the input's "text" member as the
 * export's raw input.
 *
 * Build: clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *          -nodefaultlibs -o count_vowels.wasm count_vowels.c -lc
 */
#include <stdint.h>
#include <string.h>

#define IMPORT(name) __attribute__((import_module("extism:host/env"), import_name(name)))
IMPORT("input_length") uint64_t input_length(void);
IMPORT("input_load_u8") uint8_t input_load_u8(uint64_t offset);
IMPORT("alloc") uint64_t alloc(uint64_t length);
IMPORT("store_u8") void store_u8(uint64_t offset, uint8_t value);
IMPORT("output_set") void output_set(uint64_t offset, uint64_t length);

static void put_uint(char *buf, size_t *len, uint64_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) buf[(*len)++] = digits[--n];
}

__attribute__((export_name("count_vowels"))) int32_t count_vowels(void) {
    uint64_t n = input_length(), count = 0;
    for (uint64_t i = 0; i < n; i++) {
        char c = (char)input_load_u8(i);
        if (c && strchr("aeiouAEIOU", c)) count++;
    }
    char out[96];
    size_t len = 0;
    const char *a = "{\"count\":";
    memcpy(out, a, strlen(a));
    len += strlen(a);
    put_uint(out, &len, count);
    const char *b = ",\"total\":";
    memcpy(out + len, b, strlen(b));
    len += strlen(b);
    put_uint(out, &len, n);
    const char *c = ",\"vowels\":\"aeiouAEIOU\"}";
    memcpy(out + len, c, strlen(c));
    len += strlen(c);
    uint64_t off = alloc(len);
    for (size_t i = 0; i < len; i++) store_u8(off + i, (uint8_t)out[i]);
    output_set(off, len);
    return 0;
}
