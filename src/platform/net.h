/* net.h: the TCP helpers the coordinator, the agent and the CLI share.
 * All sockets are close-on-exec; connections are non-blocking once made. */
#ifndef TFOS_PLATFORM_NET_H
#define TFOS_PLATFORM_NET_H
#include <stddef.h>

/* Split "host:port" (host may be "[v6]"). host receives a NUL-terminated copy.
 * Returns TFOS_EINVAL naming nothing: the caller knows which option it was. */
int tfos__parse_hostport(const char *s, char *host, size_t hostlen, int *port);
/* The other way: "host:port", "[host]:port" for an IPv6 address, in buf.
 * Returns buf. */
const char *tfos__format_hostport(char *buf, size_t len, const char *host, int port);

/* Listen on host:port (port 0: any). Writes the fd and the bound port. */
int tfos__tcp_listen(const char *host, int port, int backlog, int *fd, int *bound_port);

/* Connect to host:port within timeout_ms. The returned fd is non-blocking. */
int tfos__tcp_connect(const char *host, int port, int timeout_ms, int *fd);

/* Reserve a TCP port for a node: a listening socket on 0.0.0.0 with no
 * SO_REUSEADDR/SO_REUSEPORT, so no other socket can bind that port (on any
 * address) until this one is closed. Close-on-exec, so the reservation ends
 * exactly when the user program execs. The port is drawn at random outside
 * the kernel's ephemeral range (ip_local_port_range), from
 * TFOS_RESERVED_PORT_MIN up: between the exec and the program's own bind
 * the kernel never gives it to another socket (a connect, a bind to port 0);
 * where that range leaves no room, or every draw is taken, the kernel
 * chooses. */
#define TFOS_RESERVED_PORT_MIN 10000
int tfos__reserve_port(int *fd, int *port);
/* The kernel's ephemeral range, read from /proc (32768-60999 if it cannot
 * be read). */
void tfos__ephemeral_range(int *lo, int *hi);

int tfos__set_nonblock(int fd);

/* Peer address of a connected socket as "ip:port" into buf. */
void tfos__peer_name(int fd, char *buf, size_t len);

#endif
