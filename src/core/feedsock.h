/* feedsock.h: how producers obtain a node's feed rings.
 *
 * Each node agent owns two rings: "input" (producers -> the program) and
 * "output" (the program's inference results -> producers). It listens on a
 * link (core/link.h) at the abstract Unix address
 * "@tfos-feed-<cluster id>-<executor id>" (no file to clean up, no path
 * length limit). A producer dials it; the agent refuses peers of another uid
 * (root excepted), greets with a nonce, expects FEED_OPEN carrying
 * HMAC(secret, nonce), and answers FEED_OK naming the node, with the two
 * ring fds riding on that frame (SCM_RIGHTS). Every step is bounded. */
#ifndef TFOS_CORE_FEEDSOCK_H
#define TFOS_CORE_FEEDSOCK_H
#include <stddef.h>

/* The agent's side, on its event loop: listen at the node's feed address;
 * every producer gets its handshake as its bytes arrive, none of it ever
 * blocking the loop. At most 16 producers are in their handshake at once (a
 * new one evicts the oldest) and each has 2 s to finish it; refusals are
 * logged, a few per 10 s. in_fd and out_fd stay the caller's; they must
 * outlive the server. TFOS_ESYS (errno: EADDRINUSE when another agent of
 * this cluster and executor listens), TFOS_ENOMEM. */
typedef struct tfos__feed_server tfos__feed_server;
struct tfos__loop;
int tfos__feed_server_open(tfos__feed_server **out, struct tfos__loop *loop, const char *cluster_id, int executor_id,
                           const char *secret, const char *node, int in_fd, int out_fd);
void tfos__feed_server_close(tfos__feed_server *s);

/* Connect to node `executor_id`'s feed socket and receive its ring fds.
 * `node` (may be NULL) receives the node's name. Retries a refused connection
 * until timeout_ms (the agent may not listen yet), or until `stop` (may be
 * NULL; set by another thread) is set: TFOS_ESTOPPED. The caller owns both fds.
 * `err` gets a one-line reason on failure: TFOS_ECLOSED when nothing
 * listens there, TFOS_EAUTH when the agent refused the secret. */
int tfos__feed_connect(const char *cluster_id, int executor_id, const char *secret, int timeout_ms,
                       _Atomic int *stop, int *in_fd, int *out_fd, char *node, size_t nodelen, char *err,
                       size_t errlen);

#endif
