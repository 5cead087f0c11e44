/* error.c: TFOS_E* codes to text. */
#include "tfos/tfos.h"

const char *tfos_strerror(int err)
{
    switch (err) {
    case TFOS_OK: return "success";
    case TFOS_EINVAL: return "invalid argument";
    case TFOS_ENOMEM: return "out of memory";
    case TFOS_ESYS: return "system call failed";
    case TFOS_EPROTO: return "protocol error (malformed or unexpected frame)";
    case TFOS_ETOOBIG: return "frame or record too large";
    case TFOS_EAUTH: return "authentication failed (wrong cluster secret)";
    case TFOS_ETIMEDOUT: return "timed out";
    case TFOS_ECLOSED: return "peer closed the connection";
    case TFOS_EAGAIN: return "try again";
    case TFOS_EFAILED: return "a node of the cluster failed";
    case TFOS_ESTOPPED: return "stopped";
    case TFOS_EFULL: return "no room";
    case TFOS_EEND: return "end of feed";
    default: return "unknown error";
    }
}
