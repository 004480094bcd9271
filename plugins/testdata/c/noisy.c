/*
 * noisy.c — one of the sandbox's heaviest attacks as a plugin a tenant
 * can upload: a tool that fills 16 MiB of memory, over and over, with one
 * bulk instruction a turn (built with -mbulk-memory, memset is
 * memory.fill), until its call is stopped. Built to measure what it does
 * to another tenant's calls.
 */
#include "agentic.h"

#include <string.h>

static char field[16 << 20];

static int fill(const agentic_call *c, agentic_buf *out) {
    (void)c;
    (void)out;
    for (unsigned char v = 0;; v++) {
        memset(field, v, sizeof field);
        __asm__ volatile("" ::: "memory"); /* keep every fill */
    }
}

static const agentic_tool tools[] = {
    {.name = "fill", .description = "Fill 16 MiB of memory until stopped.", .effect = "read", .handler = fill},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
