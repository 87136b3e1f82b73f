/* serve_endpoints.h - the endpoints every part of the service agrees on by default, declared
 * once: the frontend binds its client endpoint there, and the clients of it inside the
 * service (the http gateway, the metrics actor, `strata serve`) connect there unless told
 * otherwise.  Constants only. */
#ifndef SERVE_ENDPOINTS_H
#define SERVE_ENDPOINTS_H

/* The frontend's client endpoint (docs/PROTOCOL.md): the frontend's `client` option. */
#define SERVE_CLIENT_ENDPOINT "tcp://127.0.0.1:5555"

#endif
