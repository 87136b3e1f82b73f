/* base_notify.h - tells the service manager that started this process (systemd with
 * Type=notify) how it is doing: READY=1 once it serves, STOPPING=1 when a drain or stop
 * begins, STATUS= a line for `systemctl status`.  Owns the notify socket's address,
 * taken from $NOTIFY_SOCKET once; without a manager every call does nothing.
 *
 *     base_notify_t *n = base_notify_new();      // NULL: no manager, or a bad address
 *     base_notify_send(n, "READY=1\nSTATUS=ready on %s", endpoint);
 *     ...
 *     base_notify_send(n, "STOPPING=1\nSTATUS=draining");
 *     base_notify_destroy(&n);
 */
#ifndef BASE_NOTIFY_H
#define BASE_NOTIFY_H

typedef struct base_notify_t base_notify_t;

/* The manager's notify socket from $NOTIFY_SOCKET (a path, or @NAME: an abstract socket),
 * and $NOTIFY_SOCKET removed from the environment, so that the processes this one starts
 * (the supervisor's actors) do not speak for it.  NULL when the variable is not set, or
 * when it names no address this module can reach (logged: a vsock address, too long). */
base_notify_t *base_notify_new(void);

/* Destroy it (NULL or an already destroyed one: nothing happens); *self_p = NULL. */
void base_notify_destroy(base_notify_t **self_p);

/* Send one notification: printf(fmt, ...), assignments one per line ("READY=1\n
 * STATUS=...").  self NULL (no manager): nothing sent, 0.  Else 0, -EMSGSIZE for a text
 * longer than 4 KiB (nothing sent), or the -errno of socket or sendto (the manager gone:
 * -ECONNREFUSED or -ENOENT); the caller goes on either way, a notification is advice. */
int base_notify_send(base_notify_t *self, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
