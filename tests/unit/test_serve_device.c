/* test_serve_device.c - serve/serve_device: the worker's device= text (every accepted
 * spelling and the refusals, which name the values), the T0 formats each device keeps, and
 * the backend each gives: none for cpu, the CPU backend for cpu-seam, and for CUDA either
 * the CUDA backend (a GPU machine) or a reason naming the device (here: no GPU, or a build
 * without CUDA). */
#include "serve_device.h"
#include "test_util.h"

#include "kv_codec.h"

#include <check.h>
#include <errno.h>
#include <string.h>

START_TEST(parse_accepts_and_names) {
    const char *in[] = {NULL, "", "cpu", "cpu-seam", "cuda", "cuda:0", "cuda:3"};
    const char *name[] = {"cpu", "cpu", "cpu", "cpu-seam", "cuda:0", "cuda:0", "cuda:3"};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        serve_device_t d;
        char err[128] = "", buf[32];
        ck_assert_int_eq(serve_device_parse(in[i], &d, err, sizeof err), 0);
        ck_assert_str_eq(serve_device_name(&d, buf, sizeof buf), name[i]);
        ck_assert_str_eq(err, "");
    }
}
END_TEST

START_TEST(parse_refuses) {
    const char *bad[] = {"gpu",     "cuda:", "cuda:-1", "cuda:x",
                         "cuda:1x", "CPU",   "cpu ",    "cuda:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        serve_device_t d;
        char err[128] = "";
        ck_assert_int_eq(serve_device_parse(bad[i], &d, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[i]) && strstr(err, "cpu-seam") && strstr(err, "cuda:N"),
                      "%s: %s", bad[i], err);
    }
}
END_TEST

START_TEST(kv_formats) {
    serve_device_t cpu = {SERVE_DEVICE_CPU, 0}, seam = {SERVE_DEVICE_SEAM, 0},
                   cuda = {SERVE_DEVICE_CUDA, 0};
    int fmts[] = {KV_FMT_F32, KV_FMT_F16, KV_FMT_I8};
    for (int i = 0; i < 3; i++) {
        ck_assert(serve_device_kv_ok(&cpu, fmts[i]));
        ck_assert(serve_device_kv_ok(&seam, fmts[i]));
        ck_assert(serve_device_kv_ok(&cuda, fmts[i]) == (fmts[i] == KV_FMT_F16));
    }
    ck_assert(!serve_device_kv_ok(&seam, KV_FMT_I4)); /* a lower tier's format, not T0's */
}
END_TEST

START_TEST(backends) {
    char err[256] = "";
    serve_device_t cpu = {SERVE_DEVICE_CPU, 0}, seam = {SERVE_DEVICE_SEAM, 0};
    ck_assert_ptr_null(serve_device_backend(&cpu, err, sizeof err));
    ck_assert_str_eq(err, "");
    kern_backend_t *be = serve_device_backend(&seam, err, sizeof err);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(be->name, "cpu");
    kern_backend_destroy(&be);
    serve_device_t far = {SERVE_DEVICE_CUDA, 1000};
    ck_assert_ptr_null(serve_device_backend(&far, err, sizeof err));
    ck_assert_msg(strstr(err, "cuda:1000"), "%s", err);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("serve_device");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parse_accepts_and_names);
    tcase_add_test(tc, parse_refuses);
    tcase_add_test(tc, kv_formats);
    tcase_add_test(tc, backends);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_NOFORK);
}
