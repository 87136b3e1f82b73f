/* actor_curve.c - CURVE key files, socket roles and the per-process ZAP
 * handler (ZeroMQ RFC 27) with one allow-list per domain.  CZMQ's zauth keeps
 * one list for every domain; strata needs two (actors, clients). */
#include "actor_curve.h"

#include "base_log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TAG "curve"
#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_NO_SECRET "0000000000000000000000000000000000000000" /* zcert's "no secret key" */

struct actor_curve_t {
    zactor_t *zap; /* the handler thread; NULL when nothing uses CURVE */
};

/* What the handler thread owns (it frees it). */
typedef struct {
    zhash_t *actors;  /* Z85 public keys admitted in ACTOR_CURVE_DOMAIN */
    zhash_t *clients; /* Z85 public keys admitted in ACTOR_CURVE_CLIENT_DOMAIN */
} s_lists_t;

const char *actor_curve_keys(const actor_topology_t *topo) {
    return actor_topology_opt(topo, "security", "keys", NULL);
}

bool actor_curve_needed(const actor_topology_t *topo, const char *endpoint) {
    return endpoint && !strncmp(endpoint, "tcp://", 6) && actor_curve_keys(topo);
}

/* Load the zcert of path (public, plus the pair when its _secret file is
 * readable).  NULL with err when it cannot be read, or has no secret key and
 * need_secret. */
static zcert_t *s_cert(const char *path, bool need_secret, char *err, size_t errlen) {
    zcert_t *c = zcert_load(path);
    if (c && need_secret && !strcmp(zcert_secret_txt(c), S_NO_SECRET))
        zcert_destroy(&c);
    if (!c)
        snprintf(err, errlen, "CURVE keys: cannot read the %s %s%s",
                 need_secret ? "key pair" : "public key", path, need_secret ? "_secret" : "");
    return c;
}

int actor_curve_server(zsock_t *sock, const char *cert, const char *domain, char *err,
                       size_t errlen) {
    zcert_t *c = s_cert(cert, true, err, errlen);
    if (!c)
        return -ENOENT;
    zcert_apply(c, sock);
    zsock_set_curve_server(sock, 1);
    zsock_set_zap_domain(sock, domain);
    zcert_destroy(&c);
    return 0;
}

int actor_curve_client(zsock_t *sock, const char *cert, const char *server, char *err,
                       size_t errlen) {
    zcert_t *c = s_cert(cert, true, err, errlen);
    if (!c)
        return -ENOENT;
    zcert_t *s = s_cert(server, false, err, errlen);
    if (!s) {
        zcert_destroy(&c);
        return -ENOENT;
    }
    zcert_apply(c, sock);
    zsock_set_curve_serverkey(sock, zcert_public_txt(s));
    zcert_destroy(&c);
    zcert_destroy(&s);
    return 0;
}

/* Add the public key of every zcert file in dir (not the _secret files, not
 * dot files) to list.  0, or -ENOENT with err when dir cannot be read or holds
 * no key. */
static int s_load_dir(zhash_t *list, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "CURVE keys: cannot read the directory %s: %s", dir, strerror(errno));
        return -ENOENT;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len > 7 && !strcmp(e->d_name + len - 7, "_secret")))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        zcert_t *c = zcert_load(path);
        if (!c)
            continue; /* not a zcert file */
        zhash_insert(list, zcert_public_txt(c), (void *)"");
        zcert_destroy(&c);
        n++;
    }
    closedir(d);
    if (!n) {
        snprintf(err, errlen, "CURVE keys: no public key in %s (strata keygen)", dir);
        return -ENOENT;
    }
    return 0;
}

/* Answer one ZAP request on rep (RFC 27): 200 when the CURVE key is on the
 * list of its domain, else 400. */
static void s_zap_answer(zsock_t *rep, const s_lists_t *lists) {
    zmsg_t *req = zmsg_recv(rep);
    if (!req)
        return;
    char *version = zmsg_popstr(req), *id = zmsg_popstr(req), *domain = zmsg_popstr(req);
    char *address = zmsg_popstr(req), *identity = zmsg_popstr(req), *mech = zmsg_popstr(req);
    zframe_t *key = zmsg_pop(req);
    const char *status = "400", *text = "key not allowed";
    char user[41] = ""; /* the admitted key (Z85): the User-Id of the peer's messages */
    if (!version || strcmp(version, "1.0")) {
        text = "bad ZAP version";
    } else if (mech && !strcmp(mech, "CURVE") && key && zframe_size(key) == 32 && domain) {
        char txt[41];
        zmq_z85_encode(txt, zframe_data(key), 32);
        zhash_t *list = !strcmp(domain, ACTOR_CURVE_DOMAIN)          ? lists->actors
                        : !strcmp(domain, ACTOR_CURVE_CLIENT_DOMAIN) ? lists->clients
                                                                     : NULL;
        if (list && zhash_lookup(list, txt)) {
            status = "200";
            text = "OK";
            memcpy(user, txt, sizeof user);
        } else {
            LOG_W(TAG, "refused %s key %s from %s", domain, txt, address ? address : "?");
        }
    } else if (mech && !strcmp(mech, "NULL") && domain && !domain[0]) {
        status = "200"; /* a plain socket without a domain never asks; be explicit anyway */
        text = "OK";
    }
    zmsg_t *rep_msg = zmsg_new();
    zmsg_addstr(rep_msg, "1.0");
    zmsg_addstr(rep_msg, id ? id : "");
    zmsg_addstr(rep_msg, status);
    zmsg_addstr(rep_msg, text);
    zmsg_addstr(rep_msg, user);
    zmsg_addmem(rep_msg, NULL, 0);
    zmsg_send(&rep_msg, rep);
    zframe_destroy(&key);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&domain);
    zstr_free(&address);
    zstr_free(&identity);
    zstr_free(&mech);
    zmsg_destroy(&req);
}

/* The handler thread: bind the ZAP endpoint, report "OK" or "FAIL why", answer
 * requests until $TERM. */
static void s_zap(zsock_t *pipe, void *args) {
    s_lists_t *lists = args;
    zsock_t *rep = zsock_new(ZMQ_REP);
    zsock_signal(pipe, 0);
    if (!rep || zsock_bind(rep, S_ZAP_ENDPOINT) < 0) {
        zstr_sendf(pipe, "FAIL cannot bind %s (a second ZAP handler in this process?)",
                   S_ZAP_ENDPOINT);
    } else {
        zstr_send(pipe, "OK");
        zpoller_t *poller = zpoller_new(pipe, rep, NULL);
        while (poller) {
            void *which = zpoller_wait(poller, -1);
            if (which != rep)
                break; /* $TERM or interrupted */
            s_zap_answer(rep, lists);
        }
        zpoller_destroy(&poller);
    }
    zsock_destroy(&rep);
    zhash_destroy(&lists->actors);
    zhash_destroy(&lists->clients);
    free(lists);
}

actor_curve_t *actor_curve_new(const actor_topology_t *topo, const char *name, char *err,
                               size_t errlen) {
    actor_curve_t *self = calloc(1, sizeof *self);
    s_lists_t *lists = calloc(1, sizeof *lists);
    if (!self || !lists) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    lists->actors = zhash_new();
    lists->clients = zhash_new();
    const char *keys = actor_curve_keys(topo);
    bool front = !name || !strcmp(name, "frontend");
    const char *client_allow =
        front ? actor_topology_opt(topo, "frontend", "client_allow", NULL) : NULL;
    const char *client_secret =
        front ? actor_topology_opt(topo, "frontend", "client_secret", NULL) : NULL;
    if (!client_allow != !client_secret) {
        snprintf(err, errlen,
                 "frontend: CURVE on the client endpoint needs both client_secret= "
                 "and client_allow= (docs/SECURITY.md)");
        goto fail;
    }
    if (!keys && !client_allow) {
        zhash_destroy(&lists->actors);
        zhash_destroy(&lists->clients);
        free(lists);
        return self; /* nothing uses CURVE */
    }
    if (!zmq_has("curve")) {
        snprintf(err, errlen,
                 "CURVE keys are configured but this libzmq was built without "
                 "CURVE (zmq_has(\"curve\") is false)");
        goto fail;
    }
    char why[1024];
    if (keys && s_load_dir(lists->actors, keys, err, errlen))
        goto fail;
    if (client_allow && s_load_dir(lists->clients, client_allow, err, errlen))
        goto fail;
    if (client_secret) { /* the client endpoint's own pair */
        zcert_t *c = s_cert(client_secret, true, err, errlen);
        if (!c)
            goto fail;
        zcert_destroy(&c);
    }
    /* the pairs this process will use: its own name, or every actor with a tcp endpoint */
    for (int i = 0; keys && i < topo->n; i++) {
        const actor_topo_entry_t *e = &topo->entries[i];
        if ((name && strcmp(e->name, name)) || !actor_curve_needed(topo, e->endpoint))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.key", keys, e->name);
        zcert_t *c = s_cert(path, true, why, sizeof why);
        if (!c) {
            snprintf(err, errlen, "%s (strata keygen %s %s)", why, keys, e->name);
            goto fail;
        }
        zcert_destroy(&c);
    }
    self->zap = zactor_new(s_zap, lists); /* lists now belong to the thread */
    lists = NULL;
    char *answer = self->zap ? zstr_recv(self->zap) : NULL;
    if (!answer || strcmp(answer, "OK")) {
        snprintf(err, errlen, "CURVE: %s", answer ? answer + 5 : "cannot start the ZAP handler");
        zstr_free(&answer);
        goto fail;
    }
    zstr_free(&answer);
    return self;
fail:
    if (lists) {
        zhash_destroy(&lists->actors);
        zhash_destroy(&lists->clients);
        free(lists);
    }
    actor_curve_destroy(&self);
    return NULL;
}

void actor_curve_destroy(actor_curve_t **self_p) {
    if (!self_p || !*self_p)
        return;
    zactor_destroy(&(*self_p)->zap);
    free(*self_p);
    *self_p = NULL;
}

int actor_curve_frontend_client(zsock_t *sock, const actor_topology_t *topo, const char *client_key,
                                const char *doc, char *err, size_t errlen) {
    const char *server = actor_topology_opt(topo, "frontend", "client_secret", NULL);
    if (!server)
        return 0;
    if (!client_key) {
        snprintf(err, errlen,
                 "the frontend's client endpoint has CURVE (client_secret): client_key=FILE is "
                 "needed (%s)",
                 doc);
        return -EINVAL;
    }
    return actor_curve_client(sock, client_key, server, err, errlen);
}
