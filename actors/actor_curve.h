/* actor_curve.h - CURVE on strata's sockets (docs/SECURITY.md): the key files
 * of the topology's `security - keys=DIR` line, the CURVE server and client
 * roles of a socket, and the process's ZAP handler, which admits a peer when
 * its public key is on the allow-list of the socket's ZAP domain.
 *
 * Key files are zcert files as `strata keygen` writes them: DIR/NAME.key (the
 * public key) and DIR/NAME.key_secret (the pair).  Actor NAME binds with the
 * pair of DIR/NAME.key and connects to actor PEER with its own pair and the
 * public key of DIR/PEER.key; every public key in DIR may connect to an actor.
 * The client endpoint has its own pair and allow-list (the frontend's options
 * client_secret and client_allow), so a client key never reaches an actor.
 */
#ifndef ACTOR_CURVE_H
#define ACTOR_CURVE_H

#include "actor_topology.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>

#define ACTOR_CURVE_DOMAIN "strata"               /* ZAP domain of actors' inbound sockets */
#define ACTOR_CURVE_CLIENT_DOMAIN "strata-client" /* ZAP domain of the client endpoint */

/* The key directory of topo (its security line), or NULL when none is set. */
const char *actor_curve_keys(const actor_topology_t *topo);
/* True when a socket at endpoint between actors of topo uses CURVE: a tcp://
 * endpoint and a key directory.  ipc:// and inproc:// stay plain. */
bool actor_curve_needed(const actor_topology_t *topo, const char *endpoint);

/* The ZAP handler of this process (one per process: it binds
 * inproc://zeromq.zap.01), a thread with the allow-lists it serves. */
typedef struct actor_curve_t actor_curve_t;

/* Check what process `name` of topo needs (NULL: every actor, as in thread
 * mode) and start the handler: libzmq has CURVE, name's key pair is readable,
 * the allow-lists (the keys directory; for the frontend, client_allow) hold at
 * least one key.  Nothing to check: a handler that admits nobody.  NULL with a
 * one-line reason in err (e.g. "CURVE keys: cannot read the key pair
 * /k/worker0.key_secret (strata keygen /k worker0)"). */
actor_curve_t *actor_curve_new(const actor_topology_t *topo, const char *name, char *err,
                               size_t errlen);
/* Stop the handler; nulls *self_p; safe twice. */
void actor_curve_destroy(actor_curve_t **self_p);

/* Make sock (not yet bound) a CURVE server with the key pair of the zcert file
 * cert (its "_secret" companion is read) and ZAP domain.  0, or -ENOENT with
 * err (the pair cannot be read). */
int actor_curve_server(zsock_t *sock, const char *cert, const char *domain, char *err,
                       size_t errlen);
/* Make sock (not yet connected) a CURVE client with the key pair of cert and
 * the server's public key from the zcert file server.  0 or -ENOENT with err. */
int actor_curve_client(zsock_t *sock, const char *cert, const char *server, char *err,
                       size_t errlen);
/* An actor that is a client of the frontend's client endpoint (http, metrics): when
 * that endpoint has CURVE (the frontend's client_secret), make sock (not yet
 * connected) a CURVE client with the key pair client_key (NULL: -EINVAL, err says it
 * is needed; doc names the document that says how).  0 also when no CURVE is needed. */
int actor_curve_frontend_client(zsock_t *sock, const actor_topology_t *topo, const char *client_key,
                                const char *doc, char *err, size_t errlen);

#endif
