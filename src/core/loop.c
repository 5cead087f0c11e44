/* loop.c: the event loop (see loop.h): epoll for descriptors, a small table
 * of caller-owned timers scanned for the earliest deadline, an eventfd for
 * wake-ups from other threads.
 *
 * Each epoll registration carries the fd and a generation number, bumped
 * whenever the fd is unwatched: an event collected for an fd that was
 * unwatched (and maybe reused) later in the same iteration is recognised as
 * stale and dropped. Timers are few (a handful per component), so a linear
 * scan is cheaper than a heap and keeps arming allocation-free in the common
 * case. */
#include "core/loop.h"

#include "platform/clock.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_EVENTS 64

typedef struct watch {
    tfos__fd_fn fn; /* NULL: not watched */
    void *user;
    int events;
    int in_epoll; /* quiet watches (events 0) are kept out of epoll, which would report hang-ups anyway */
    uint32_t gen;
} watch;

struct tfos__loop {
    int epfd;
    int wakefd;
    watch *fds;
    int nfds; /* size of fds[] (indexed by fd) */
    tfos__timer **timers;
    int ntimers, tcap;
    void (*before)(void *), (*after)(void *);
    void *hook_user;
};

static uint32_t ep_events(int events)
{
    return (events & TFOS_EV_READ ? EPOLLIN : 0) | (events & TFOS_EV_WRITE ? EPOLLOUT : 0);
}

int tfos__loop_open(tfos__loop **out)
{
    tfos__loop *l = calloc(1, sizeof *l);
    if (!l)
        return TFOS_ENOMEM;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->epfd < 0 || l->wakefd < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev) < 0)
        goto fail;
    *out = l;
    return 0;
fail:;
    int e = errno;
    tfos__loop_close(l);
    errno = e;
    return TFOS_ESYS;
}

void tfos__loop_close(tfos__loop *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->ntimers; i++)
        l->timers[i]->armed = 0;
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->wakefd >= 0)
        close(l->wakefd);
    free(l->fds);
    free(l->timers);
    free(l);
}

static int grow_fds(tfos__loop *l, int fd)
{
    if (fd < l->nfds)
        return 0;
    int n = l->nfds ? l->nfds : 64;
    while (n <= fd)
        n *= 2;
    watch *w = realloc(l->fds, (size_t)n * sizeof *w);
    if (!w)
        return TFOS_ENOMEM;
    memset(w + l->nfds, 0, (size_t)(n - l->nfds) * sizeof *w);
    l->fds = w;
    l->nfds = n;
    return 0;
}

/* Bring epoll in line with fds[fd]: registered with its events, or out of
 * it while quiet. */
static int ep_set(tfos__loop *l, int fd)
{
    watch *w = &l->fds[fd];
    if (!w->events) {
        if (w->in_epoll && epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) < 0)
            return TFOS_ESYS;
        w->in_epoll = 0;
        return 0;
    }
    struct epoll_event ev = {.events = ep_events(w->events), .data.u64 = (uint64_t)w->gen << 32 | (uint32_t)fd};
    if (epoll_ctl(l->epfd, w->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) < 0)
        return TFOS_ESYS;
    w->in_epoll = 1;
    return 0;
}

int tfos__loop_watch(tfos__loop *l, int fd, int events, tfos__fd_fn fn, void *user)
{
    if (fd < 0 || !fn)
        return TFOS_EINVAL;
    if (grow_fds(l, fd))
        return TFOS_ENOMEM;
    watch *w = &l->fds[fd];
    w->fn = fn;
    w->user = user;
    w->events = events;
    int rc = ep_set(l, fd);
    if (rc)
        tfos__loop_unwatch(l, fd);
    return rc;
}

int tfos__loop_events(tfos__loop *l, int fd, int events)
{
    if (fd < 0 || fd >= l->nfds || !l->fds[fd].fn)
        return TFOS_EINVAL;
    if (l->fds[fd].events == events)
        return 0;
    l->fds[fd].events = events;
    return ep_set(l, fd);
}

void tfos__loop_unwatch(tfos__loop *l, int fd)
{
    if (fd < 0 || fd >= l->nfds || !l->fds[fd].fn)
        return;
    if (l->fds[fd].in_epoll)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
    l->fds[fd].in_epoll = 0;
    l->fds[fd].fn = NULL;
    l->fds[fd].gen++;
}

void tfos__timer_arm(tfos__loop *l, tfos__timer *t, int64_t at_ms, tfos__timer_fn fn, void *user)
{
    t->at_ms = at_ms;
    t->fn = fn;
    t->user = user;
    if (t->armed)
        return;
    if (l->ntimers == l->tcap) {
        int n = l->tcap ? l->tcap * 2 : 16;
        tfos__timer **nt = realloc(l->timers, (size_t)n * sizeof *nt);
        if (!nt)
            abort(); /* a few pointers: out of memory here means the process is done for */
        l->timers = nt;
        l->tcap = n;
    }
    t->slot = l->ntimers;
    l->timers[l->ntimers++] = t;
    t->armed = 1;
}

void tfos__timer_disarm(tfos__loop *l, tfos__timer *t)
{
    if (!t->armed)
        return;
    int i = t->slot;
    l->timers[i] = l->timers[--l->ntimers];
    l->timers[i]->slot = i;
    t->armed = 0;
}

void tfos__loop_wake(tfos__loop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->wakefd, &one, sizeof one);
    (void)w; /* a full counter still wakes the loop */
}

void tfos__loop_set_sleep_hooks(tfos__loop *l, void (*before)(void *), void (*after)(void *), void *user)
{
    l->before = before;
    l->after = after;
    l->hook_user = user;
}

/* Fire the timers due at `now`, earliest first. Each is disarmed before its
 * callback, which may arm it again; one armed again for a time already past
 * waits for the next iteration, so a callback cannot spin the loop. */
static int fire_timers(tfos__loop *l, int64_t now)
{
    int fired = 0;
    int budget = l->ntimers;
    while (budget-- > 0) {
        tfos__timer *due = NULL;
        for (int i = 0; i < l->ntimers; i++)
            if (l->timers[i]->at_ms <= now && (!due || l->timers[i]->at_ms < due->at_ms))
                due = l->timers[i];
        if (!due)
            break;
        tfos__timer_disarm(l, due);
        due->fn(l, due, due->user);
        fired++;
    }
    return fired;
}

int tfos__loop_run(tfos__loop *l, int max_wait_ms)
{
    int64_t now = tfos__now_ms();
    int64_t wait = max_wait_ms;
    for (int i = 0; i < l->ntimers; i++) {
        int64_t d = l->timers[i]->at_ms - now;
        if (d < 0)
            d = 0;
        if (wait < 0 || d < wait)
            wait = d;
    }
    if (wait > 24LL * 3600 * 1000)
        wait = 24LL * 3600 * 1000;
    struct epoll_event evs[MAX_EVENTS];
    if (l->before)
        l->before(l->hook_user);
    int n = epoll_wait(l->epfd, evs, MAX_EVENTS, (int)wait);
    int e = errno;
    if (l->after)
        l->after(l->hook_user);
    if (n < 0) {
        errno = e;
        return TFOS_ESYS;
    }
    int ran = 0;
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == UINT64_MAX) {
            uint64_t v;
            while (read(l->wakefd, &v, sizeof v) > 0)
                ;
            continue;
        }
        int fd = (int)(uint32_t)evs[i].data.u64;
        uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
        if (fd >= l->nfds || !l->fds[fd].fn || l->fds[fd].gen != gen)
            continue; /* unwatched by an earlier callback of this iteration */
        int ev = 0;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
            ev |= TFOS_EV_READ;
        if (evs[i].events & EPOLLOUT)
            ev |= TFOS_EV_WRITE;
        ev &= l->fds[fd].events | TFOS_EV_READ;
        if (!ev)
            continue;
        l->fds[fd].fn(l, fd, ev, l->fds[fd].user);
        ran++;
    }
    return ran + fire_timers(l, tfos__now_ms());
}
