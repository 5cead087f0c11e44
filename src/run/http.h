/* http.h: a tiny HTTP/1.0 server for the launcher's status page.
 *
 * GET only, small responses, one request per connection. Driven from the
 * launcher's loop: tfos__http_step never blocks (it serves what is ready).
 * Requests over 8 KiB or idle for 5 s are dropped. */
#ifndef TFOS_RUN_HTTP_H
#define TFOS_RUN_HTTP_H

/* Build the response for `path`: return a malloc'd body (the server frees
 * it) and set *content_type and *status (200, 404...). */
typedef char *(*tfos__http_handler)(const char *path, const char **content_type, int *status, void *user);

typedef struct tfos__http tfos__http;

int tfos__http_open(tfos__http **out, const char *host, int port, tfos__http_handler h, void *user);
int tfos__http_port(const tfos__http *h);
void tfos__http_step(tfos__http *h);
void tfos__http_close(tfos__http *h);

#endif
