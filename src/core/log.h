/* log.h: the library's internal logging entry point. The library never
 * prints directly; lines go to the sink set with tfos_set_logger(). */
#ifndef TFOS_CORE_LOG_H
#define TFOS_CORE_LOG_H
#include <stddef.h>

#include "tfos/tfos.h"

/* printf-style; one line, no trailing newline. Thread-safe. */
void tfos__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Format a one-line error message, keep it as the calling thread's last
 * error (tfos_last_error) and, when err is not NULL, copy it into
 * err[errlen]; return rc. The pattern of every function that reports "what
 * failed, where" to its caller: `return tfos__errf(NULL, 0, TFOS_EPROTO, "...")`. */
int tfos__errf(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define TFOS_DEBUG(...) tfos__log(TFOS_LOG_DEBUG, __VA_ARGS__)
#define TFOS_INFO(...) tfos__log(TFOS_LOG_INFO, __VA_ARGS__)
#define TFOS_WARN(...) tfos__log(TFOS_LOG_WARN, __VA_ARGS__)
#define TFOS_ERROR(...) tfos__log(TFOS_LOG_ERROR, __VA_ARGS__)

#endif
