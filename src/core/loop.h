/* loop.h: the one event loop every tfos program runs (Redis's ae, in small).
 *
 * A loop watches file descriptors (epoll) and fires timers. Components -- the
 * coordinator, the agent, the launcher, the status page's HTTP server --
 * register their descriptors and timers with a loop that their program owns;
 * none of them owns a loop of its own. One iteration (tfos__loop_run) sleeps
 * exactly until the earliest armed timer, a descriptor event, a wake-up from
 * another thread, or the caller's bound, whichever comes first, then
 * dispatches what is ready: descriptor callbacks first, then due timers.
 *
 * Threads: a loop and everything registered with it belong to the thread that
 * runs it; only tfos__loop_wake may be called from other threads. A program
 * whose other threads must touch the registered components (the Python
 * driver) sets sleep hooks that release its lock while the loop sleeps and
 * take it back before dispatching.
 *
 * Callbacks may register, unregister, arm and clear anything, including the
 * descriptor or timer being dispatched; an fd unwatched during an iteration
 * gets no further callbacks in that iteration. */
#ifndef TFOS_CORE_LOOP_H
#define TFOS_CORE_LOOP_H
#include <stdint.h>

enum { TFOS_EV_READ = 1, TFOS_EV_WRITE = 2 };

typedef struct tfos__loop tfos__loop;

/* Called with the events that fired (TFOS_EV_READ, TFOS_EV_WRITE; errors and
 * hang-ups are reported as READ so the reader finds them). */
typedef void (*tfos__fd_fn)(tfos__loop *l, int fd, int events, void *user);

/* A timer: storage owned by the component that arms it (a field of its
 * struct), so arming never allocates. Zero-initialise before first use. */
typedef struct tfos__timer tfos__timer;
typedef void (*tfos__timer_fn)(tfos__loop *l, tfos__timer *t, void *user);
struct tfos__timer {
    int64_t at_ms;        /* tfos__now_ms() deadline while armed */
    tfos__timer_fn fn;
    void *user;
    int slot;             /* index in the loop's table; -1 / 0 when disarmed (internal) */
    int armed;
};

/* Create a loop. The caller owns *out (tfos__loop_close). TFOS_ESYS, TFOS_ENOMEM. */
int tfos__loop_open(tfos__loop **out);
/* Free the loop. Descriptors stay open (they are their owners'); timers are
 * disarmed. NULL is a no-op. */
void tfos__loop_close(tfos__loop *l);

/* Watch fd for `events` (TFOS_EV_*), calling fn(l, fd, events, user); a
 * second call for the same fd replaces its events, callback and user. events
 * 0 keeps the fd registered but quiet. TFOS_EINVAL (bad fd), TFOS_ESYS, TFOS_ENOMEM. */
int tfos__loop_watch(tfos__loop *l, int fd, int events, tfos__fd_fn fn, void *user);
/* Change only the events of a watched fd (e.g. add WRITE while output waits). */
int tfos__loop_events(tfos__loop *l, int fd, int events);
/* Stop watching fd. Call before closing it. Unknown fds are ignored. */
void tfos__loop_unwatch(tfos__loop *l, int fd);

/* Arm t to fire once at at_ms (tfos__now_ms() time), re-arming it if it was
 * armed. A timer that should repeat re-arms itself from its callback. */
void tfos__timer_arm(tfos__loop *l, tfos__timer *t, int64_t at_ms, tfos__timer_fn fn, void *user);
/* Disarm t (no-op when it is not armed). */
void tfos__timer_disarm(tfos__loop *l, tfos__timer *t);

/* One iteration: wait until the next timer, an event, a wake-up or max_wait_ms
 * (negative: no bound but the timers'; 0: do not wait), then dispatch.
 * Returns the number of callbacks run, or TFOS_ESYS (errno EINTR when a
 * signal handler interrupted the wait: nothing was dispatched). */
int tfos__loop_run(tfos__loop *l, int max_wait_ms);

/* Make a sleeping tfos__loop_run return (thread-safe, async-signal-safe). */
void tfos__loop_wake(tfos__loop *l);

/* Hooks called right before the loop sleeps and right after it wakes, with
 * `user` (e.g. to release and retake a lock that other threads use while the
 * loop sleeps). Either may be NULL. */
void tfos__loop_set_sleep_hooks(tfos__loop *l, void (*before)(void *), void (*after)(void *), void *user);

#endif
