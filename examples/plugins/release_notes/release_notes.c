/*
 * release_notes — an example deliverable validator in C (with the kit in
 * pdk/c): it checks release notes an agent wrote before they are accepted.
 *
 * The host first checks the deliverable against the schema below (types,
 * required fields, lengths); this code adds what a schema cannot say well:
 * the version is semantic (MAJOR.MINOR.PATCH), the title does not end with
 * a period, no change is a leftover "TODO", and changes are not repeated.
 * A valid deliverable is returned with its title trimmed.
 */
#include "agentic.h"

#include <stdlib.h>
#include <string.h>

static const char schema[] =
    "{\"type\":\"object\",\"required\":[\"version\",\"title\",\"changes\"],\"additionalProperties\":false,"
    "\"properties\":{"
    "\"version\":{\"type\":\"string\"},"
    "\"title\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":80},"
    "\"changes\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":50,\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200}}}}";

/* semver reports whether s is MAJOR.MINOR.PATCH without leading zeros. */
static bool semver(const char *s) {
    for (int part = 0; part < 3; part++) {
        if (*s < '0' || *s > '9') return false;
        if (*s == '0' && s[1] >= '0' && s[1] <= '9') return false;
        while (*s >= '0' && *s <= '9') s++;
        if (part < 2 && *s++ != '.') return false;
    }
    return *s == 0;
}

static bool contains_todo(const char *s) {
    for (; *s; s++) {
        if ((s[0] == 'T' || s[0] == 't') && (s[1] == 'O' || s[1] == 'o') && (s[2] == 'D' || s[2] == 'd') &&
            (s[3] == 'O' || s[3] == 'o')) {
            return true;
        }
    }
    return false;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

static int check(agentic_str d, agentic_validation *v) {
    char *version = agentic_json_get_string(d, "version");
    char *title_raw = agentic_json_get_string(d, "title");
    agentic_str changes;
    if (!version || !title_raw || !agentic_json_get(d, "changes", &changes)) {
        free(version);
        free(title_raw);
        agentic_fail(v, "the deliverable passed the schema but lacks a field");
        return AGENTIC_ERROR;
    }
    if (!semver(version)) {
        agentic_invalid(v, "/version", "must be a semantic version MAJOR.MINOR.PATCH, e.g. 1.4.0");
    }
    char *title = trim(title_raw);
    size_t tn = strlen(title);
    if (tn == 0) {
        agentic_invalid(v, "/title", "must not be blank");
    } else if (title[tn - 1] == '.') {
        agentic_invalid(v, "/title", "must not end with a period");
    }

    /* the changes: no TODO, no duplicates */
    char *seen[50] = {0};
    size_t n = 0, cursor = 0;
    agentic_str item;
    while (agentic_json_array_next(changes, &cursor, &item) && n < 50) {
        char *text = agentic_json_string(item);
        char path[32] = "/changes/";
        size_t len = strlen(path);
        size_t k = n, digits = 0;
        char rev[8];
        do { rev[digits++] = (char)('0' + k % 10); k /= 10; } while (k);
        while (digits) path[len++] = rev[--digits];
        path[len] = 0;
        if (text && contains_todo(text)) {
            agentic_invalid(v, path, "is a leftover TODO");
        }
        for (size_t j = 0; text && j < n; j++) {
            if (seen[j] && strcmp(seen[j], text) == 0) {
                agentic_invalid(v, path, "repeats an earlier change");
                break;
            }
        }
        seen[n++] = text;
    }

    /* the value: the deliverable with its title trimmed */
    agentic_buf value = {0};
    agentic_buf_puts(&value, "{\"version\":");
    agentic_buf_json_cstring(&value, version);
    agentic_buf_puts(&value, ",\"title\":");
    agentic_buf_json_cstring(&value, title);
    agentic_buf_puts(&value, ",\"changes\":");
    agentic_buf_append(&value, changes.ptr, changes.len);
    agentic_buf_puts(&value, "}");
    agentic_set_value(v, value.ptr, value.len);
    agentic_buf_free(&value);

    for (size_t j = 0; j < n; j++) free(seen[j]);
    free(version);
    free(title_raw);
    return AGENTIC_OK;
}

static const agentic_validator validators[] = {
    {.name = "release_notes",
     .description = "Release notes: a semantic version, a title without a final period, changes without TODOs or repeats.",
     .schema = schema,
     .handler = check},
};

AGENTIC_PLUGIN(NULL, 0, validators, AGENTIC_COUNT(validators), NULL, 0);
