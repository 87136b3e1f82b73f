/* test_notify.c - base_notify: what a service manager receives.  The test plays systemd:
 * it binds a datagram socket (a path, then an abstract name), points $NOTIFY_SOCKET at it,
 * and reads what base_notify_send sent; no manager and a bad address send nothing. */
#include "base_notify.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The manager's end: a datagram socket bound to name (a path, or @abstract). */
static int s_manager(const char *name) {
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path, name, n);
    if (name[0] == '@')
        a.sun_path[0] = 0;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] != '@'));
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, len), 0);
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* The next datagram the manager got, as a string ("" after 2 s without one). */
static const char *s_received(int fd) {
    static char buf[8192];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* What the manager gets at the address name (a path or @abstract). */
static void s_check_address(const char *name) {
    int fd = s_manager(name);
    setenv("NOTIFY_SOCKET", name, 1);
    base_notify_t *n = base_notify_new();
    ck_assert_ptr_nonnull(n);
    /* removed, so that a child process (an actor) does not notify for this one */
    ck_assert_ptr_null(getenv("NOTIFY_SOCKET"));
    ck_assert_int_eq(base_notify_send(n, "READY=1\nSTATUS=ready on %s", "tcp://x:5555"), 0);
    ck_assert_str_eq(s_received(fd), "READY=1\nSTATUS=ready on tcp://x:5555");
    ck_assert_int_eq(base_notify_send(n, "STOPPING=1"), 0);
    ck_assert_str_eq(s_received(fd), "STOPPING=1");
    close(fd);
    /* the manager gone: an error to the caller, who goes on */
    ck_assert_int_lt(base_notify_send(n, "STATUS=alone"), 0);
    base_notify_destroy(&n);
    ck_assert_ptr_null(n);
    base_notify_destroy(&n); /* safe twice */
}

START_TEST(path_socket) {
    char dir[] = "/tmp/strata-notify-XXXXXX", path[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/notify", dir);
    s_check_address(path);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(abstract_socket) {
    char name[64];
    snprintf(name, sizeof name, "@strata-notify-test-%d", (int)getpid());
    s_check_address(name);
}
END_TEST

START_TEST(no_manager) {
    unsetenv("NOTIFY_SOCKET");
    base_notify_t *n = base_notify_new();
    ck_assert_ptr_null(n);
    ck_assert_int_eq(base_notify_send(n, "READY=1"), 0); /* nothing to tell: no error */
    /* an address it cannot reach (a vsock one, a relative path): none, and the variable
     * is gone all the same */
    setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    ck_assert_ptr_null(base_notify_new());
    ck_assert_ptr_null(getenv("NOTIFY_SOCKET"));
}
END_TEST

START_TEST(too_long) {
    char name[64];
    snprintf(name, sizeof name, "@strata-notify-long-%d", (int)getpid());
    int fd = s_manager(name);
    setenv("NOTIFY_SOCKET", name, 1);
    base_notify_t *n = base_notify_new();
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    ck_assert_int_eq(base_notify_send(n, "STATUS=%s", big), -EMSGSIZE);
    base_notify_destroy(&n);
    close(fd);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("notify");
    tcase_add_test(tc, path_socket);
    tcase_add_test(tc, abstract_socket);
    tcase_add_test(tc, no_manager);
    tcase_add_test(tc, too_long);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
