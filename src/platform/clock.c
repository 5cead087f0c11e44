/* clock.c: monotonic milliseconds, and the wall clock for dating events. */
#include "platform/clock.h"

#include <time.h>

int64_t tfos__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tfos__ms_left(int64_t deadline_ms, int cap_ms)
{
    int64_t left = deadline_ms - tfos__now_ms();
    if (left < 0)
        left = 0;
    if (cap_ms >= 0 && left > cap_ms)
        left = cap_ms;
    return (int)left;
}

double tfos__wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
