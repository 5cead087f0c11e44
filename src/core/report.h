/* report.h: a program's progress report, what ctx.report(step=120,
 * loss=0.31) publishes and the status page shows per node. The text form
 * travels through the ring header (tfos__ring_report), the heartbeat and
 * the coordinator: pairs "name=number" separated by single spaces, at most
 * TFOS__REPORT_MAX_PAIRS, names [A-Za-z_][A-Za-z0-9_.]{0,31}, numbers as
 * strtod reads them (nan and inf included). Every reader re-checks it: the
 * text comes from the user's process. */
#ifndef TFOS_CORE_REPORT_H
#define TFOS_CORE_REPORT_H
#include <stddef.h>
#include <stdio.h>

#define TFOS__REPORT_MAX_PAIRS 16
#define TFOS__REPORT_MAX_NAME 32

/* 1 if name[0..len) is a valid metric name. */
int tfos__report_name_ok(const char *name, size_t len);

/* Append "name=value" to the report in buf (len: its current length, kept
 * NUL-terminated). TFOS_EINVAL: a bad name or the pair limit reached;
 * TFOS_ETOOBIG: it does not fit cap. Nothing is appended on error. */
int tfos__report_add(char *buf, size_t cap, size_t *len, const char *name, size_t name_len, double value);

/* Check a report. 0, or TFOS_EPROTO with a static reason in *why. */
int tfos__report_check(const char *text, const char **why);

/* Write a checked report as a JSON object ({"step": 120, "loss": 0.31};
 * nan and inf as the strings "nan", "inf", "-inf"), or null when it does not
 * check. */
void tfos__report_json(FILE *f, const char *text);

#endif
