/*
 * liar.c — raw test plugins (no kit) whose describe or answers lie or are
 * malformed. Build with -DLIE_<NAME> for one variant.
 */
#include "agentic.h"

#include <string.h>

/* block copies bytes into a new Extism memory block. */
static extism_ptr block(const char *s, size_t n) {
    extism_ptr off = extism_alloc(n);
    for (size_t i = 0; i < n; i++) extism_store_u8(off + i, (uint8_t)s[i]);
    return off;
}

static void out(const char *s) {
    size_t n = strlen(s);
    extism_output_set(block(s, n), n);
}

#define TOOL(schema, effect) "{\"name\":\"t\",\"description\":\"d\",\"input_schema\":" schema ",\"effect\":\"" effect "\"}"

#if defined(LIE_BAD_SCHEMA)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":12}", "read") "]}"
#elif defined(LIE_REMOTE_REF)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\",\"$ref\":\"file:///etc/passwd\"}", "read") "]}"
#elif defined(LIE_NOT_OBJECT)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"string\"}", "read") "]}"
#elif defined(LIE_ABI2)
#define DESCRIBE "{\"abi\":\"2.0\",\"tools\":[" TOOL("{\"type\":\"object\"}", "read") "]}"
#elif defined(LIE_NO_ABI)
#define DESCRIBE "{\"tools\":[" TOOL("{\"type\":\"object\"}", "read") "]}"
#elif defined(LIE_BAD_EFFECT)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\"}", "sometimes") "]}"
#elif defined(LIE_BAD_NAME)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[{\"name\":\"no spaces allowed\",\"effect\":\"read\"}]}"
#elif defined(LIE_DUPLICATE)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\"}", "read") "," TOOL("{\"type\":\"object\"}", "read") "]}"
#elif defined(LIE_NOT_JSON)
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[oops"
#elif defined(LIE_NO_VALIDATE)
/* describes a validator but has no validate export */
#define DESCRIBE "{\"abi\":\"1.0\",\"validators\":[{\"name\":\"v\",\"schema\":{}}]}"
#define NO_VALIDATE
#elif defined(LIE_VALUE)
/* a validator whose value does not match its own schema */
#define DESCRIBE "{\"abi\":\"1.0\",\"validators\":[{\"name\":\"v\",\"schema\":{\"type\":\"object\",\"required\":[\"title\"],\"properties\":{\"title\":{\"type\":\"string\"}}}}]}"
#define VALIDATE "{\"ok\":true,\"value\":{\"nope\":1}}"
#elif defined(LIE_EXPLODE)
/* a tool and a validator whose schema's work explodes with the value's
 * depth: $ref recursion through three anyOf branches */
#define NODE "{\"$defs\":{\"n\":{\"anyOf\":[" \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}}}," \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"x\"]}," \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"y\"]}]}}," \
    "\"type\":\"object\",\"$ref\":\"#/$defs/n\"}"
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL(NODE, "read") "],\"validators\":[{\"name\":\"v\",\"schema\":" NODE "}]}"
#elif defined(LIE_DYNAMIC_REF)
/* a schema whose $dynamicRef makes its cost unknowable before validation */
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\",\"$dynamicAnchor\":\"n\",\"properties\":{\"a\":{\"$dynamicRef\":\"#n\"}}}", "read") "]}"
#elif defined(LIE_INIT_TRAP)
/* a module whose initialisation (its constructors, run by _initialize
 * before the first call) traps */
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\"}", "read") "]}"
__attribute__((constructor)) static void init_trap(void) { __builtin_trap(); }
#elif defined(LIE_MALFORMED)
/* a tool whose answers are malformed, chosen by input.mode */
#define DESCRIBE "{\"abi\":\"1.0\",\"tools\":[" TOOL("{\"type\":\"object\"}", "read") "],\"policies\":[{\"name\":\"p\"}]}"
#define MALFORMED
#else
#error "define one LIE_ variant"
#endif

__attribute__((export_name("describe"))) int32_t describe(void) {
    out(DESCRIBE);
    return 0;
}

__attribute__((export_name("call"))) int32_t call(void) {
#ifdef MALFORMED
    size_t n = (size_t)extism_input_length();
    char buf[512];
    if (n >= sizeof buf) n = sizeof buf - 1;
    for (size_t i = 0; i < n; i++) buf[i] = (char)extism_input_load_u8(i);
    buf[n] = 0;
    if (strstr(buf, "\"array\"")) out("[1,2,3]");
    else if (strstr(buf, "\"empty\"")) out("");
    else if (strstr(buf, "\"trailing\"")) out("{\"output\":1} {\"output\":2}");
    else if (strstr(buf, "\"trap\"")) __builtin_trap();
    else if (strstr(buf, "\"ok\"")) out("{\"output\":\"fine\"}");
    else if (strstr(buf, "\"error_set\"")) {
        const char *msg = "set through error_set";
        extism_error_set(block(msg, strlen(msg)));
        return 1;
    } else out("{\"output\": oops");
#else
    out("{\"output\":null}");
#endif
    return 0;
}

__attribute__((export_name("decide"))) int32_t decide(void) {
    out("{\"decision\":\"maybe\"}");
    return 0;
}

#ifndef NO_VALIDATE
__attribute__((export_name("validate"))) int32_t validate(void) {
#ifdef VALIDATE
    out(VALIDATE);
#else
    out("{\"ok\":true}");
#endif
    return 0;
}
#endif
