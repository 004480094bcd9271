/*
 * agentic.c — the C kit for agentic-host plugins: the exports, the JSON
 * envelope, and wrappers of the host's functions. See agentic.h.
 */
#include "agentic.h"

#include <stdlib.h>
#include <string.h>

/* Weak: a plugin without AGENTIC_NEEDS links, and says nothing. */
extern const char agentic_needs[] __attribute__((weak));

/* ---- Extism memory -------------------------------------------------------- */

extism_ptr agentic_block(const void *data, size_t len) {
    extism_ptr off = extism_alloc(len);
    const uint8_t *p = (const uint8_t *)data;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        extism_store_u64(off + i, v);
    }
    for (; i < len; i++) {
        extism_store_u8(off + i, p[i]);
    }
    return off;
}

char *agentic_block_read(extism_ptr off, size_t *len) {
    size_t n = off ? (size_t)extism_length(off) : 0;
    char *out = malloc(n + 1);
    if (!out) {
        __builtin_trap();
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = extism_load_u64(off + i);
        memcpy(out + i, &v, 8);
    }
    for (; i < n; i++) {
        out[i] = (char)extism_load_u8(off + i);
    }
    out[n] = 0;
    if (len) {
        *len = n;
    }
    return out;
}

static char *read_input(size_t *len) {
    size_t n = (size_t)extism_input_length();
    char *out = malloc(n + 1);
    if (!out) {
        __builtin_trap();
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = extism_input_load_u64(i);
        memcpy(out + i, &v, 8);
    }
    for (; i < n; i++) {
        out[i] = (char)extism_input_load_u8(i);
    }
    out[n] = 0;
    *len = n;
    return out;
}

static void output(const agentic_buf *b) {
    extism_ptr off = agentic_block(b->ptr, b->len);
    extism_output_set(off, b->len);
}

/* ---- Buffers --------------------------------------------------------------- */

void agentic_buf_append(agentic_buf *b, const char *data, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + len + 1) {
            cap *= 2;
        }
        char *p = realloc(b->ptr, cap);
        if (!p) {
            __builtin_trap();
        }
        b->ptr = p;
        b->cap = cap;
    }
    memcpy(b->ptr + b->len, data, len);
    b->len += len;
    b->ptr[b->len] = 0;
}

void agentic_buf_puts(agentic_buf *b, const char *s) { agentic_buf_append(b, s, strlen(s)); }

void agentic_buf_json_string(agentic_buf *b, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    agentic_buf_append(b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
                u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = 0;
                esc = u;
            }
        }
        if (esc) {
            agentic_buf_append(b, s + start, i - start);
            agentic_buf_puts(b, esc);
            start = i + 1;
        }
    }
    agentic_buf_append(b, s + start, len - start);
    agentic_buf_append(b, "\"", 1);
}

void agentic_buf_json_cstring(agentic_buf *b, const char *s) {
    if (!s) {
        agentic_buf_puts(b, "null");
        return;
    }
    agentic_buf_json_string(b, s, strlen(s));
}

void agentic_buf_int(agentic_buf *b, long long v) {
    char tmp[24];
    int i = 23;
    tmp[i] = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) {
        tmp[--i] = '-';
    }
    agentic_buf_puts(b, tmp + i);
}

void agentic_buf_free(agentic_buf *b) {
    free(b->ptr);
    b->ptr = NULL;
    b->len = b->cap = 0;
}

/* ---- JSON reading ------------------------------------------------------------ */

#define MAX_DEPTH 128

static size_t skip_ws(const char *p, size_t i, size_t n) {
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) {
        i++;
    }
    return i;
}

/* skip_value returns the index just past the value starting at i, or 0 on
 * malformed JSON (a value never ends at index 0). */
static size_t skip_value(const char *p, size_t i, size_t n, int depth) {
    if (i >= n || depth > MAX_DEPTH) {
        return 0;
    }
    char c = p[i];
    if (c == '"') {
        for (i++; i < n; i++) {
            if (p[i] == '\\') {
                i++;
            } else if (p[i] == '"') {
                return i + 1;
            }
        }
        return 0;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        i = skip_ws(p, i + 1, n);
        if (i < n && p[i] == close) {
            return i + 1;
        }
        for (;;) {
            if (c == '{') {
                if (i >= n || p[i] != '"') {
                    return 0;
                }
                i = skip_value(p, i, n, depth + 1);
                if (!i) {
                    return 0;
                }
                i = skip_ws(p, i, n);
                if (i >= n || p[i] != ':') {
                    return 0;
                }
                i = skip_ws(p, i + 1, n);
            }
            i = skip_value(p, i, n, depth + 1);
            if (!i) {
                return 0;
            }
            i = skip_ws(p, i, n);
            if (i < n && p[i] == ',') {
                i = skip_ws(p, i + 1, n);
                continue;
            }
            if (i < n && p[i] == close) {
                return i + 1;
            }
            return 0;
        }
    }
    /* numbers and literals */
    size_t start = i;
    while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\t' && p[i] != '\n' &&
           p[i] != '\r') {
        i++;
    }
    return i > start ? i : 0;
}

static agentic_str trim(agentic_str s) {
    size_t i = skip_ws(s.ptr, 0, s.len);
    size_t j = s.len;
    while (j > i && (s.ptr[j - 1] == ' ' || s.ptr[j - 1] == '\t' || s.ptr[j - 1] == '\n' || s.ptr[j - 1] == '\r')) {
        j--;
    }
    agentic_str out = {s.ptr + i, j - i};
    return out;
}

char agentic_json_kind(agentic_str v) {
    v = trim(v);
    if (!v.len) {
        return 0;
    }
    char c = v.ptr[0];
    if (c == '-' || (c >= '0' && c <= '9')) {
        return '0';
    }
    return c;
}

static void put_utf8(agentic_buf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp; n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    agentic_buf_append(b, u, n);
}

static int hex4(const char *p, size_t i, size_t n, unsigned *out) {
    if (i + 4 > n) {
        return 0;
    }
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) {
        char c = p[i + k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

char *agentic_json_string(agentic_str v) {
    v = trim(v);
    if (v.len < 2 || v.ptr[0] != '"' || v.ptr[v.len - 1] != '"') {
        return NULL;
    }
    agentic_buf b = {0};
    agentic_buf_append(&b, "", 0);
    const char *p = v.ptr;
    size_t n = v.len - 1;
    for (size_t i = 1; i < n; i++) {
        char c = p[i];
        if (c != '\\') {
            agentic_buf_append(&b, &c, 1);
            continue;
        }
        if (++i >= n) {
            break;
        }
        switch (p[i]) {
        case 'n': agentic_buf_append(&b, "\n", 1); break;
        case 't': agentic_buf_append(&b, "\t", 1); break;
        case 'r': agentic_buf_append(&b, "\r", 1); break;
        case 'b': agentic_buf_append(&b, "\b", 1); break;
        case 'f': agentic_buf_append(&b, "\f", 1); break;
        case 'u': {
            unsigned cp;
            if (!hex4(p, i + 1, n, &cp)) {
                agentic_buf_free(&b);
                return NULL;
            }
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < n + 1 && p[i + 1] == '\\' && p[i + 2] == 'u') {
                unsigned lo;
                if (hex4(p, i + 3, n, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD; /* a lone surrogate */
            }
            put_utf8(&b, cp);
            break;
        }
        default: agentic_buf_append(&b, p + i, 1); /* \" \\ \/ */
        }
    }
    return b.ptr;
}

bool agentic_json_get(agentic_str obj, const char *key, agentic_str *value) {
    const char *p = obj.ptr;
    size_t n = obj.len, i = skip_ws(p, 0, n);
    if (i >= n || p[i] != '{') {
        return false;
    }
    i = skip_ws(p, i + 1, n);
    size_t klen = strlen(key);
    while (i < n && p[i] == '"') {
        size_t kend = skip_value(p, i, n, 1);
        if (!kend) {
            return false;
        }
        bool match = false;
        agentic_str k = {p + i, kend - i};
        if (memchr(k.ptr, '\\', k.len)) {
            char *dk = agentic_json_string(k);
            match = dk && strcmp(dk, key) == 0;
            free(dk);
        } else {
            match = k.len == klen + 2 && memcmp(k.ptr + 1, key, klen) == 0;
        }
        i = skip_ws(p, kend, n);
        if (i >= n || p[i] != ':') {
            return false;
        }
        i = skip_ws(p, i + 1, n);
        size_t vend = skip_value(p, i, n, 1);
        if (!vend) {
            return false;
        }
        if (match) {
            value->ptr = p + i;
            value->len = vend - i;
            return true;
        }
        i = skip_ws(p, vend, n);
        if (i < n && p[i] == ',') {
            i = skip_ws(p, i + 1, n);
        }
    }
    return false;
}

char *agentic_json_get_string(agentic_str obj, const char *key) {
    agentic_str v;
    if (!agentic_json_get(obj, key, &v)) {
        return NULL;
    }
    return agentic_json_string(v);
}

bool agentic_json_get_int(agentic_str obj, const char *key, long long *out) {
    agentic_str v;
    if (!agentic_json_get(obj, key, &v)) {
        return false;
    }
    v = trim(v);
    size_t i = 0;
    bool neg = false;
    if (i < v.len && v.ptr[i] == '-') {
        neg = true;
        i++;
    }
    if (i >= v.len) {
        return false;
    }
    long long x = 0;
    for (; i < v.len; i++) {
        char c = v.ptr[i];
        if (c < '0' || c > '9') {
            return false;
        }
        x = x * 10 + (c - '0');
    }
    *out = neg ? -x : x;
    return true;
}

bool agentic_json_array_next(agentic_str a, size_t *cursor, agentic_str *elem) {
    const char *p = a.ptr;
    size_t n = a.len, i = *cursor;
    if (i == 0) {
        i = skip_ws(p, 0, n);
        if (i >= n || p[i] != '[') {
            return false;
        }
        i++;
    }
    i = skip_ws(p, i, n);
    if (i < n && p[i] == ',') {
        i = skip_ws(p, i + 1, n);
    }
    if (i >= n || p[i] == ']') {
        *cursor = n;
        return false;
    }
    size_t end = skip_value(p, i, n, 1);
    if (!end) {
        *cursor = n;
        return false;
    }
    elem->ptr = p + i;
    elem->len = end - i;
    *cursor = end;
    return true;
}

/* ---- Exports ----------------------------------------------------------------- */

static void answer_error(const char *msg) {
    agentic_buf b = {0};
    agentic_buf_puts(&b, "{\"error\":");
    agentic_buf_json_cstring(&b, msg);
    agentic_buf_puts(&b, "}");
    output(&b);
    agentic_buf_free(&b);
}

static bool is_schema(const char *s) { return s && *s; }

__attribute__((export_name("describe"))) int32_t agentic_describe(void) {
    const agentic_plugin *pl = &agentic_plugin_def;
    agentic_buf b = {0};
    agentic_buf_puts(&b, "{\"abi\":\"" AGENTIC_ABI "\",\"tools\":[");
    for (size_t i = 0; i < pl->n_tools; i++) {
        const agentic_tool *t = &pl->tools[i];
        if (i) agentic_buf_puts(&b, ",");
        agentic_buf_puts(&b, "{\"name\":");
        agentic_buf_json_cstring(&b, t->name);
        agentic_buf_puts(&b, ",\"description\":");
        agentic_buf_json_cstring(&b, t->description ? t->description : "");
        agentic_buf_puts(&b, ",\"input_schema\":");
        agentic_buf_puts(&b, is_schema(t->input_schema) ? t->input_schema : "{\"type\":\"object\"}");
        agentic_buf_puts(&b, ",\"effect\":");
        agentic_buf_json_cstring(&b, t->effect ? t->effect : "");
        agentic_buf_puts(&b, t->idempotent ? ",\"idempotent\":true" : ",\"idempotent\":false");
        if (t->at_most_once) agentic_buf_puts(&b, ",\"at_most_once\":true");
        agentic_buf_puts(&b, ",\"timeout_ms\":");
        agentic_buf_int(&b, t->timeout_ms);
        agentic_buf_puts(&b, "}");
    }
    agentic_buf_puts(&b, "],\"validators\":[");
    for (size_t i = 0; i < pl->n_validators; i++) {
        const agentic_validator *v = &pl->validators[i];
        if (i) agentic_buf_puts(&b, ",");
        agentic_buf_puts(&b, "{\"name\":");
        agentic_buf_json_cstring(&b, v->name);
        agentic_buf_puts(&b, ",\"description\":");
        agentic_buf_json_cstring(&b, v->description ? v->description : "");
        agentic_buf_puts(&b, ",\"schema\":");
        agentic_buf_puts(&b, is_schema(v->schema) ? v->schema : "{}");
        agentic_buf_puts(&b, "}");
    }
    agentic_buf_puts(&b, "],\"policies\":[");
    for (size_t i = 0; i < pl->n_policies; i++) {
        const agentic_policy *p = &pl->policies[i];
        if (i) agentic_buf_puts(&b, ",");
        agentic_buf_puts(&b, "{\"name\":");
        agentic_buf_json_cstring(&b, p->name);
        agentic_buf_puts(&b, ",\"description\":");
        agentic_buf_json_cstring(&b, p->description ? p->description : "");
        agentic_buf_puts(&b, "}");
    }
    agentic_buf_puts(&b, "]");
    if (agentic_needs) {
        agentic_buf_puts(&b, ",\"needs\":");
        agentic_buf_puts(&b, agentic_needs);
    }
    agentic_buf_puts(&b, "}");
    output(&b);
    agentic_buf_free(&b);
    return 0;
}

__attribute__((export_name("call"))) int32_t agentic_call_export(void) {
    size_t n;
    char *in = read_input(&n);
    agentic_str req = {in, n};
    agentic_call c = {0};
    c.tool = agentic_json_get_string(req, "tool");
    c.call_id = agentic_json_get_string(req, "call_id");
    c.session_id = agentic_json_get_string(req, "session_id");
    c.tenant = agentic_json_get_string(req, "tenant");
    if (!agentic_json_get(req, "input", &c.input)) {
        c.input.ptr = "{}";
        c.input.len = 2;
    }
    const agentic_tool *tool = NULL;
    for (size_t i = 0; c.tool && i < agentic_plugin_def.n_tools; i++) {
        if (strcmp(agentic_plugin_def.tools[i].name, c.tool) == 0) {
            tool = &agentic_plugin_def.tools[i];
        }
    }
    if (!tool) {
        answer_error("agentic.c: unknown tool");
    } else {
        agentic_buf out = {0};
        int rc = tool->handler(&c, &out);
        if (rc == AGENTIC_OK) {
            agentic_buf res = {0};
            agentic_buf_puts(&res, "{\"output\":");
            if (out.len) {
                agentic_buf_append(&res, out.ptr, out.len);
            } else {
                agentic_buf_puts(&res, "null");
            }
            agentic_buf_puts(&res, "}");
            output(&res);
            agentic_buf_free(&res);
        } else {
            answer_error(out.len ? out.ptr : "the tool failed");
        }
        agentic_buf_free(&out);
    }
    free((void *)c.tool);
    free((void *)c.call_id);
    free((void *)c.session_id);
    free((void *)c.tenant);
    free(in);
    return 0;
}

struct agentic_validation {
    agentic_buf problems; /* JSON array elements, comma-separated */
    size_t count;
    agentic_buf value;
    bool has_value;
    agentic_buf failure;
};

void agentic_fail(agentic_validation *v, const char *message) {
    v->failure.len = 0;
    agentic_buf_puts(&v->failure, message ? message : "the validator failed");
}

void agentic_invalid(agentic_validation *v, const char *path, const char *message) {
    agentic_buf line = {0};
    agentic_buf_puts(&line, path && *path ? path : "/");
    agentic_buf_puts(&line, ": ");
    agentic_buf_puts(&line, message ? message : "invalid");
    if (v->count++) {
        agentic_buf_puts(&v->problems, ",");
    }
    agentic_buf_json_string(&v->problems, line.ptr, line.len);
    agentic_buf_free(&line);
}

void agentic_set_value(agentic_validation *v, const char *json, size_t len) {
    v->value.len = 0;
    agentic_buf_append(&v->value, json, len);
    v->has_value = true;
}

__attribute__((export_name("validate"))) int32_t agentic_validate_export(void) {
    size_t n;
    char *in = read_input(&n);
    agentic_str req = {in, n};
    char *name = agentic_json_get_string(req, "validator");
    agentic_str deliverable;
    const agentic_validator *val = NULL;
    for (size_t i = 0; name && i < agentic_plugin_def.n_validators; i++) {
        if (strcmp(agentic_plugin_def.validators[i].name, name) == 0) {
            val = &agentic_plugin_def.validators[i];
        }
    }
    if (!val) {
        answer_error("agentic.c: unknown validator");
    } else if (!agentic_json_get(req, "deliverable", &deliverable)) {
        answer_error("agentic.c: no deliverable");
    } else {
        agentic_validation v = {0};
        int rc = val->handler(deliverable, &v);
        agentic_buf res = {0};
        if (rc != AGENTIC_OK) {
            agentic_buf_puts(&res, "{\"error\":");
            agentic_buf_json_cstring(&res, v.failure.len ? v.failure.ptr : "the validator failed");
            agentic_buf_puts(&res, "}");
        } else if (v.count) {
            agentic_buf_puts(&res, "{\"ok\":false,\"errors\":[");
            agentic_buf_append(&res, v.problems.ptr, v.problems.len);
            agentic_buf_puts(&res, "]}");
        } else {
            agentic_buf_puts(&res, "{\"ok\":true,\"value\":");
            if (v.has_value) {
                agentic_buf_append(&res, v.value.ptr, v.value.len);
            } else {
                agentic_buf_append(&res, deliverable.ptr, deliverable.len);
            }
            agentic_buf_puts(&res, "}");
        }
        output(&res);
        agentic_buf_free(&res);
        agentic_buf_free(&v.problems);
        agentic_buf_free(&v.value);
        agentic_buf_free(&v.failure);
    }
    free(name);
    free(in);
    return 0;
}

__attribute__((export_name("decide"))) int32_t agentic_decide_export(void) {
    size_t n;
    char *in = read_input(&n);
    agentic_str req = {in, n};
    agentic_policy_request r = {0};
    agentic_str tool;
    r.policy = agentic_json_get_string(req, "policy");
    if (agentic_json_get(req, "tool", &tool)) {
        r.tool = agentic_json_get_string(tool, "name");
        r.effect = agentic_json_get_string(tool, "effect");
    }
    r.session_id = agentic_json_get_string(req, "session_id");
    r.tenant = agentic_json_get_string(req, "tenant");
    r.agent = agentic_json_get_string(req, "agent");
    if (!agentic_json_get(req, "input", &r.input)) {
        r.input.ptr = "{}";
        r.input.len = 2;
    }
    const agentic_policy *pol = NULL;
    for (size_t i = 0; r.policy && i < agentic_plugin_def.n_policies; i++) {
        if (strcmp(agentic_plugin_def.policies[i].name, r.policy) == 0) {
            pol = &agentic_plugin_def.policies[i];
        }
    }
    if (!pol) {
        answer_error("agentic.c: unknown policy");
    } else {
        agentic_decision d = {0};
        int rc = pol->handler(&r, &d);
        if (rc != AGENTIC_OK || !d.decision) {
            answer_error(d.reason ? d.reason : "the policy failed");
        } else {
            agentic_buf res = {0};
            agentic_buf_puts(&res, "{\"decision\":");
            agentic_buf_json_cstring(&res, d.decision);
            agentic_buf_puts(&res, ",\"reason\":");
            agentic_buf_json_cstring(&res, d.reason ? d.reason : "");
            agentic_buf_puts(&res, ",\"summary\":");
            agentic_buf_json_cstring(&res, d.summary ? d.summary : "");
            agentic_buf_puts(&res, "}");
            output(&res);
            agentic_buf_free(&res);
        }
    }
    free((void *)r.policy);
    free((void *)r.tool);
    free((void *)r.effect);
    free((void *)r.session_id);
    free((void *)r.tenant);
    free((void *)r.agent);
    free(in);
    return 0;
}

/* ---- Host functions ------------------------------------------------------------ */

void agentic_log(int level, const char *msg) {
    extism_ptr off = agentic_block(msg, strlen(msg));
    agentic_host_log(level, off);
    extism_free(off);
}

int agentic_kv_get(const char *key, char **value, size_t *len, char **err) {
    extism_ptr k = agentic_block(key, strlen(key));
    extism_ptr res = agentic_host_kv_get(k);
    extism_free(k);
    size_t n;
    char *b = agentic_block_read(res, &n);
    extism_free(res);
    int rc;
    if (n >= 1 && b[0] == 1) {
        *value = malloc(n);
        if (!*value) {
            __builtin_trap();
        }
        memcpy(*value, b + 1, n - 1);
        (*value)[n - 1] = 0;
        *len = n - 1;
        rc = 1;
    } else if (n >= 1 && b[0] == 0) {
        rc = 0;
    } else {
        *err = malloc(n + 1);
        if (!*err) {
            __builtin_trap();
        }
        memcpy(*err, n ? b + 1 : "", n ? n - 1 : 0);
        (*err)[n ? n - 1 : 0] = 0;
        rc = -1;
    }
    free(b);
    return rc;
}

static char *host_error(extism_ptr res) {
    if (!res) {
        return NULL;
    }
    char *msg = agentic_block_read(res, NULL);
    extism_free(res);
    return msg;
}

char *agentic_kv_set(const char *key, const void *value, size_t len) {
    extism_ptr k = agentic_block(key, strlen(key));
    extism_ptr v = agentic_block(value, len);
    extism_ptr res = agentic_host_kv_set(k, v);
    extism_free(k);
    extism_free(v);
    return host_error(res);
}

char *agentic_kv_delete(const char *key) {
    extism_ptr k = agentic_block(key, strlen(key));
    extism_ptr res = agentic_host_kv_delete(k);
    extism_free(k);
    return host_error(res);
}

char *agentic_idempotency_key(void) {
    size_t len;
    extism_ptr res = agentic_host_idempotency_key();
    char *out = agentic_block_read(res, &len);
    extism_free(res);
    return out;
}

int agentic_wait_event(const char *key, char **payload, size_t *len, char **err) {
    extism_ptr k = agentic_block(key, strlen(key));
    extism_ptr res = agentic_host_wait_event(k);
    extism_free(k);
    size_t n;
    char *b = agentic_block_read(res, &n);
    extism_free(res);
    *payload = NULL;
    *len = 0;
    *err = NULL;
    if (!b || n == 0) {
        free(b);
        *err = strdup("wait_event: empty answer from the host");
        return -1;
    }
    if (b[0] != 0) {
        *err = strndup(b + 1, n - 1);
        free(b);
        return -1;
    }
    *payload = malloc(n);
    memcpy(*payload, b + 1, n - 1);
    (*payload)[n - 1] = 0;
    *len = n - 1;
    free(b);
    return 0;
}

char *agentic_wait_for(int64_t ms) {
    return host_error(agentic_host_wait_for(ms));
}

char *agentic_http(const char *request_json, size_t *len) {
    extism_ptr r = agentic_block(request_json, strlen(request_json));
    extism_ptr res = agentic_host_http_request(r);
    extism_free(r);
    char *out = agentic_block_read(res, len);
    extism_free(res);
    return out;
}
