/* log.h: the library's internal logging entry point. The library never
 * prints directly; lines go to the sink set with tfos_set_logger(). */
#ifndef TFOS_CORE_LOG_H
#define TFOS_CORE_LOG_H
#include <stddef.h>
#include <stdint.h>

#include "tfos/tfos.h"

/* printf-style; one line, no trailing newline. Thread-safe. */
void tfos__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The default sink: "tfos: warning: msg\n" in one write(2) to fd 2, so lines
 * of many processes do not mix. Also what a sink falls back to when it cannot
 * deliver a line (the Python extension's, during interpreter exit). */
void tfos__log_stderr(int level, const char *msg);

/* Format a one-line error message, keep it as the calling thread's last
 * error (tfos_last_error) and, when err is not NULL, copy it into
 * err[errlen]; return rc. The pattern of every function that reports "what
 * failed, where" to its caller: `return tfos__errf(NULL, 0, TFOS_EPROTO, "...")`. */
int tfos__errf(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Warnings a peer can cause at will (junk connections, floods): at most
 * `per_window` lines per `window_ms`; the rest are counted and summed up in
 * one line ("<who>: N more ... were not shown") by tfos__warn_limit_flush,
 * once the window is over or when forced. Zero-initialise. One thread. */
typedef struct tfos__warn_limit {
    const char *who;  /* prefix of the lines ("coordinator") */
    int per_window;
    int window_ms;
    int64_t window;   /* start of the current window (tfos__now_ms) */
    int shown, suppressed;
} tfos__warn_limit;

void tfos__warn_limited(tfos__warn_limit *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Say what the window did not show, if it is over (or with force). */
void tfos__warn_limit_flush(tfos__warn_limit *w, int force);
/* When the current window ends while something waits to be summed up, else
 * INT64_MAX: for a loop's timer. */
int64_t tfos__warn_limit_due(const tfos__warn_limit *w);

/* A token bucket for lines sent on (an agent's --forward-logs): at most
 * `per_s` a second on average and `burst` at once. Zero-initialise, then
 * tfos__rate_set; one thread. */
typedef struct tfos__rate {
    double per_s, burst, tokens;
    int64_t at_ms;    /* when tokens was last topped up (tfos__now_ms) */
} tfos__rate;

void tfos__rate_set(tfos__rate *r, double per_s, double burst);
/* Take one line's token at now_ms: 1, or 0 when the line is over the rate. */
int tfos__rate_take(tfos__rate *r, int64_t now_ms);

#define TFOS_DEBUG(...) tfos__log(TFOS_LOG_DEBUG, __VA_ARGS__)
#define TFOS_INFO(...) tfos__log(TFOS_LOG_INFO, __VA_ARGS__)
#define TFOS_WARN(...) tfos__log(TFOS_LOG_WARN, __VA_ARGS__)
#define TFOS_ERROR(...) tfos__log(TFOS_LOG_ERROR, __VA_ARGS__)

#endif
