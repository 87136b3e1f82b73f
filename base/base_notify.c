/* base_notify.c - the service manager's notification protocol (sd_notify(3)): one
 * datagram of "KEY=VALUE" lines to the AF_UNIX socket named by $NOTIFY_SOCKET.
 *
 * Written here rather than taken from libsystemd's sd_notify (libsystemd0 is in the
 * process anyway, through libczmq; the headers are Debian's libsystemd-dev):
 *  - the protocol is the manager's stable, documented interface (systemd lists it among
 *    the interfaces it keeps compatible, and documents how to speak it without the
 *    library): a path or "@abstract" address, one SOCK_DGRAM datagram of text;
 *  - sd_notify reads $NOTIFY_SOCKET at every call, so the variable must stay in the
 *    environment, and `strata serve` would hand it to every actor process it forks;
 *    here the address is read once and the variable removed (a worker's READY=1 must
 *    not make the unit ready before the supervisor is, with NotifyAccess=all);
 *  - no build dependency for about forty lines.
 * Not covered: credentials (SCM_CREDENTIALS) and file descriptors, which strata does not
 * send, and vsock addresses ("vsock:CID:PORT", for virtual machines), refused at new. */
#include "base_notify.h"

#include "base_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define TAG "notify"
#define S_MAX_TEXT 4096 /* a notification's longest text: a datagram far below any limit */

struct base_notify_t {
    struct sockaddr_un addr; /* the manager's socket: a path, or sun_path[0] = 0: abstract */
    socklen_t addr_len;      /* bytes of addr that count (an abstract name has no NUL) */
};

base_notify_t *base_notify_new(void) {
    const char *e = getenv("NOTIFY_SOCKET");
    if (!e || !*e)
        return NULL;
    base_notify_t *self = calloc(1, sizeof *self);
    size_t n = strlen(e);
    if (!self)
        goto fail;
    if ((e[0] != '/' && e[0] != '@') || n >= sizeof self->addr.sun_path) {
        LOG_W(TAG,
              "NOTIFY_SOCKET=%s: not a path or @name this process can reach: no "
              "notifications",
              e);
        goto fail;
    }
    self->addr.sun_family = AF_UNIX;
    memcpy(self->addr.sun_path, e, n);
    if (e[0] == '@')
        self->addr.sun_path[0] = 0; /* abstract: the name is the bytes after the NUL */
    self->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/'));
    unsetenv("NOTIFY_SOCKET");
    return self;
fail:
    free(self);
    unsetenv("NOTIFY_SOCKET");
    return NULL;
}

void base_notify_destroy(base_notify_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

int base_notify_send(base_notify_t *self, const char *fmt, ...) {
    if (!self)
        return 0;
    char text[S_MAX_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof text)
        return -EMSGSIZE;
    /* a socket per notification: they are a handful in a process's life */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (sendto(fd, text, (size_t)n, MSG_NOSIGNAL, (const struct sockaddr *)&self->addr,
               self->addr_len) < 0) {
        rc = -errno;
        LOG_D(TAG, "cannot notify the service manager: %s", strerror(errno));
    }
    close(fd);
    return rc;
}
