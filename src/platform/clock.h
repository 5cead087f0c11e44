/* clock.h: monotonic time for deadlines. Every bounded wait in tfos is
 * computed from these, never from the wall clock; the wall clock only dates
 * events (tfos__wall_s). */
#ifndef TFOS_PLATFORM_CLOCK_H
#define TFOS_PLATFORM_CLOCK_H
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t tfos__now_ms(void);
/* Milliseconds left until `deadline_ms` (0 when passed, capped at cap_ms when
 * cap_ms >= 0). */
int tfos__ms_left(int64_t deadline_ms, int cap_ms);
/* Seconds since the epoch on CLOCK_REALTIME, to the microsecond: when
 * something happened, comparable across machines whose clocks are kept. */
double tfos__wall_s(void);

#endif
