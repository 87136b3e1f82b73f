/* fuzz_msgs.c - libFuzzer target for msgs/: every input goes through msg_peek_type,
 * msg_peek_id, every typed decoder and msg_any_decode; whatever decodes must re-encode
 * and decode again to the same bytes.  Built by scripts/fuzz-msgs (libFuzzer) and by CMake
 * with fuzz_replay.c, which replays the seeds of fuzz_msgs_seeds.py (CTest fuzz_msgs_replay). */
#include "msg_any.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const int s_types[] = {
#define X(name, NAME, id, version, family) MSG_##NAME,
    MSG_TYPES(X)
#undef X
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int type;
    msg_err_t err;
    msg_peek_type(data, size, &type, &err);
    char id[MSG_MAX_ID_BYTES + 1];
    msg_peek_id(data, size, id, sizeof id);
    for (size_t i = 0; i < sizeof s_types / sizeof s_types[0]; i++) {
        msg_any_t m;
        if (msg_decode(s_types[i], data, size, &m.u, &err) == 0)
            msg_clear(s_types[i], &m.u);
        else if (!err.msg[0] || err.code >= 0)
            abort(); /* every failure must say why */
    }
    msg_any_t m;
    if (msg_any_decode(data, size, &m, &err) == 0) {
        void *b1, *b2;
        size_t n1, n2;
        if (msg_any_encode(&m, &b1, &n1, &err) != 0)
            abort(); /* what decodes must encode */
        msg_any_t m2;
        if (msg_any_decode(b1, n1, &m2, &err) != 0 || msg_any_encode(&m2, &b2, &n2, &err) != 0)
            abort();
        if (n1 != n2 || memcmp(b1, b2, n1))
            abort(); /* encode(decode(encode(x))) is stable */
        free(b1);
        free(b2);
        msg_any_clear(&m2);
        msg_any_clear(&m);
    }
    return 0;
}
