/* client.h: the coordinator's dialing side, shared by the node agent's
 * connection and the small clients of roles/client.c (tfos_report_abort,
 * tfos_query_status, tfos_coord_command: declared in include/tfos/tfos.h). */
#ifndef TFOS_ROLES_CLIENT_H
#define TFOS_ROLES_CLIENT_H
#include "core/link.h"

#include <stddef.h>
#include <stdint.h>

/* Connect to the coordinator at addr ("host:port") and read its greeting,
 * before `deadline` plus greet_extra_ms for the greeting (see
 * tfos__link_dial). retry: keep trying a failed connect until the deadline
 * (an agent may start before its coordinator listens); a client fails at
 * once. On error, err gets one line naming the coordinator and errno is kept
 * for TFOS_ESYS; TFOS_EINVAL for an address that is not host:port. The
 * caller owns *out and sends its first frame (tfos__link_hello with the
 * cluster secret). */
int tfos__coord_dial(tfos__link **out, const char *addr, int64_t deadline, int retry, int greet_extra_ms, char *err,
                     size_t errlen);

#endif
