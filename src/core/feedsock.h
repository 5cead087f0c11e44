/* feedsock.h: how producers obtain a node's feed rings.
 *
 * Each node agent owns two rings: "input" (producers -> the program) and
 * "output" (the program's inference results -> producers). It listens on an
 * abstract AF_UNIX socket named "tfos-feed-<cluster id>-<executor id>" (no
 * file to clean up, no path length limit). A producer connects; the agent
 * refuses peers of another uid (SO_PEERCRED), greets with a nonce, expects
 * FEED_OPEN carrying HMAC(secret, nonce), answers FEED_OK naming the node, and
 * sends the two ring fds with SCM_RIGHTS. Every step is bounded. */
#ifndef TFOS_CORE_FEEDSOCK_H
#define TFOS_CORE_FEEDSOCK_H
#include <stddef.h>

/* Listen on the node's feed socket. *fd is non-blocking, close-on-exec. */
int tfos__feed_listen(const char *cluster_id, int executor_id, int *fd);

/* Accept one producer from `lfd` (if one is waiting) and run the handshake,
 * giving it in_fd and out_fd. `node` (e.g. "worker:1") goes into FEED_OK.
 * Returns 0 (also when nobody was waiting), or an error for this producer
 * only (logged by the caller); the listener stays usable. */
int tfos__feed_serve_one(int lfd, const char *secret, const char *node, int in_fd, int out_fd, int timeout_ms);

/* Connect to node `executor_id`'s feed socket and receive its ring fds.
 * `node` (may be NULL) receives the node's name. Retries a refused connection
 * until timeout_ms (the agent may not listen yet). The caller owns both fds.
 * `err` gets a one-line reason on failure. */
int tfos__feed_connect(const char *cluster_id, int executor_id, const char *secret, int timeout_ms,
                       int *in_fd, int *out_fd, char *node, size_t nodelen, char *err, size_t errlen);

#endif
