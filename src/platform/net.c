/* net.c: TCP listen/connect/reserve on top of BSD sockets. */
#include "platform/net.h"

#include "platform/clock.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

const char *tfos__format_hostport(char *buf, size_t len, const char *host, int port)
{
    snprintf(buf, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    return buf;
}

int tfos__parse_hostport(const char *s, char *host, size_t hostlen, int *port)
{
    if (!s || !*s)
        return TFOS_EINVAL;
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return TFOS_EINVAL;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return TFOS_EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return TFOS_EINVAL;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 0 || p > 65535)
        return TFOS_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **res)
{
    struct addrinfo hints;
    char portstr[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, res);
    if (rc != 0) {
        errno = EHOSTUNREACH;
        return TFOS_ESYS;
    }
    return 0;
}

int tfos__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return TFOS_ESYS;
    return 0;
}

int tfos__tcp_listen(const char *host, int port, int backlog, int *fd_out, int *bound_port)
{
    struct addrinfo *res, *ai;
    int rc = resolve(host, port, 1, &res);
    if (rc)
        return rc;
    int fd = -1, saved = 0;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = saved;
        return TFOS_ESYS;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

int tfos__tcp_connect(const char *host, int port, int timeout_ms, int *fd_out)
{
    struct addrinfo *res, *ai;
    int rc = resolve(host, port, 0, &res);
    if (rc)
        return rc;
    int64_t deadline = tfos__now_ms() + timeout_ms;
    int fd = -1, saved = ECONNREFUSED;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n;
            do
                n = poll(&p, 1, tfos__ms_left(deadline, -1));
            while (n < 0 && errno == EINTR);
            int err = 0;
            socklen_t el = sizeof err;
            if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
                break;
            saved = n == 0 ? ETIMEDOUT : (err ? err : errno);
        } else {
            saved = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = saved;
        return saved == ETIMEDOUT ? TFOS_ETIMEDOUT : TFOS_ESYS;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return 0;
}

void tfos__ephemeral_range(int *lo, int *hi)
{
    *lo = 32768;
    *hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (!f)
        return;
    int a, b;
    if (fscanf(f, "%d %d", &a, &b) == 2 && a >= 1 && a <= b && b <= 65535) {
        *lo = a;
        *hi = b;
    }
    fclose(f);
}

/* A listening socket on 0.0.0.0:port (0: the kernel's choice); -1 with errno. */
static int listen_on(int port, int *port_out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port_out = ntohs(sa.sin_port);
    return fd;
}

#define RESERVE_DRAWS 64
int tfos__reserve_port(int *fd_out, int *port_out)
{
    int lo, hi;
    tfos__ephemeral_range(&lo, &hi);
    unsigned below = lo > TFOS_RESERVED_PORT_MIN ? (unsigned)(lo - TFOS_RESERVED_PORT_MIN) : 0;
    unsigned above = hi < 65535 ? (unsigned)(65535 - hi) : 0;
    uint32_t draws[RESERVE_DRAWS];
    int ndraws = below + above > 0 && getrandom(draws, sizeof draws, 0) == (ssize_t)sizeof draws ? RESERVE_DRAWS : 0;
    int fd = -1;
    for (int i = 0; i < ndraws && fd < 0; i++) {
        unsigned r = draws[i] % (below + above);
        int port = r < below ? TFOS_RESERVED_PORT_MIN + (int)r : hi + 1 + (int)(r - below);
        fd = listen_on(port, port_out);
        if (fd < 0 && errno != EADDRINUSE && errno != EACCES)
            break; /* not a taken port: the kernel's choice would fail alike */
    }
    if (fd < 0)
        fd = listen_on(0, port_out);
    if (fd < 0)
        return TFOS_ESYS;
    *fd_out = fd;
    return 0;
}

void tfos__peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
            port = ntohs(s4->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
            port = ntohs(s6->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%d", ip, port);
}
