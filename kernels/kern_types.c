/* kern_types.c - what each tensor type is (traits, row sizes), scalar
 * half/bfloat16 conversions, and the choice of the kernel table for this CPU.
 */
#include "base_log.h"
#include "cpu/kern_cpu.h"
#include "kern_ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "kern"

static const kern_type_traits_t s_traits[KERN_TYPE_COUNT] = {
    [KERN_F32] = {"f32", 1, 4, KERN_F32, true},
    [KERN_F16] = {"f16", 1, 2, KERN_F32, true},
    [KERN_BF16] = {"bf16", 1, 2, KERN_F32, true},
    [KERN_Q4_0] = {"q4_0", KERN_QK, sizeof(kern_block_q4_0), KERN_Q8_0, true},
    [KERN_Q4_1] = {"q4_1", KERN_QK, sizeof(kern_block_q4_1), KERN_Q8_1, true},
    [KERN_Q5_0] = {"q5_0", KERN_QK, sizeof(kern_block_q5_0), KERN_Q8_0, true},
    [KERN_Q5_1] = {"q5_1", KERN_QK, sizeof(kern_block_q5_1), KERN_Q8_1, true},
    [KERN_Q8_0] = {"q8_0", KERN_QK, sizeof(kern_block_q8_0), KERN_Q8_0, true},
    [KERN_Q8_1] = {"q8_1", KERN_QK, sizeof(kern_block_q8_1), KERN_Q8_1, false},
    [KERN_Q4_K] = {"q4_K", KERN_QK_K, sizeof(kern_block_q4_K), KERN_Q8_K, true},
    [KERN_Q5_K] = {"q5_K", KERN_QK_K, sizeof(kern_block_q5_K), KERN_Q8_K, true},
    [KERN_Q6_K] = {"q6_K", KERN_QK_K, sizeof(kern_block_q6_K), KERN_Q8_K, true},
    [KERN_Q8_K] = {"q8_K", KERN_QK_K, sizeof(kern_block_q8_K), KERN_Q8_K, false},
};

const kern_type_traits_t *kern_type_traits(int t) {
    if (t < 0 || t >= KERN_TYPE_COUNT || s_traits[t].name == NULL)
        return NULL;
    return &s_traits[t];
}

size_t kern_row_size(kern_type_t t, int64_t n) {
    const kern_type_traits_t *tr = kern_type_traits((int)t);
    if (tr == NULL || n < 0)
        return 0;
    return (size_t)(n / tr->block_size) * tr->type_size;
}

/* ---- half and bfloat16 ------------------------------------------------- */

static inline uint32_t s_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float s_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kern_f16_to_f32(kern_f16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) /* inf / nan */
        return s_float(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return s_float(sign | ((exp + 112) << 23) | (man << 13));
}

kern_f16_t kern_f32_to_f16(float f) {
    uint32_t x = s_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) /* inf or nan (keep nan quiet and non-zero) */
        return (uint16_t)(sign | 0x7C00 | (ax > 0x7F800000u ? 0x200 | ((ax >> 13) & 0x3FF) : 0));
    if (ax >= 0x477FF000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7C00);
    if (ax < 0x38800000u) {
        /* result is subnormal (or zero): value / 2^-24 rounded to nearest even */
        if (ax < 0x33000000u) /* below half the smallest subnormal */
            return sign;
        uint32_t e = ax >> 23; /* biased exponent, 102..112 */
        uint32_t m = (ax & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias and round mantissa from 23 to 10 bits, nearest even */
    uint32_t r = ax - 0x38000000u; /* exponent -112 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++; /* a carry into the exponent is correct rounding */
    return (uint16_t)(sign | q);
}

float kern_bf16_to_f32(kern_bf16_t h) {
    return s_float((uint32_t)h << 16);
}

kern_bf16_t kern_f32_to_bf16(float f) {
    uint32_t x = s_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* nan: keep it a quiet nan */
        return (kern_bf16_t)((x >> 16) | 0x40);
    x += 0x7FFF + ((x >> 16) & 1);
    return (kern_bf16_t)(x >> 16);
}

/* ---- table choice ------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define KERN_CPU(feature) __builtin_cpu_supports(#feature)
#else
#define KERN_CPU(feature) 0
#endif

/* One row per variant of KERN_ISA_LIST, in its order. */
static const struct {
    const char *name;
    const kern_ops_t *tab;
} s_isa[KERN_ISA_COUNT] = {
#define S_ROW(name, tab, cpu) {#name, &kern_ops_##tab##_tab},
    KERN_ISA_LIST(S_ROW)
#undef S_ROW
};

/* Whether this CPU runs variant isa (a valid index). */
static bool s_runs(int isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
#endif
    switch (isa) {
#define S_CASE(name, tab, cpu)                                                                     \
    case KERN_ISA_##name:                                                                          \
        return (cpu);
        KERN_ISA_LIST(S_CASE)
#undef S_CASE
    default:
        return false;
    }
}

const char *kern_isa_name(int isa) {
    return isa >= 0 && isa < KERN_ISA_COUNT ? s_isa[isa].name : NULL;
}

const kern_ops_t *kern_ops_isa(int isa) {
    if (isa < 0 || isa >= KERN_ISA_COUNT || !s_runs(isa))
        return NULL;
    return s_isa[isa].tab;
}

/* The variant named name, or -1. */
static int s_isa_of(const char *name) {
    if (strcmp(name, "ref") == 0)
        return KERN_ISA_scalar;
    for (int i = 0; i < KERN_ISA_COUNT; i++)
        if (strcmp(name, s_isa[i].name) == 0)
            return i;
    return -1;
}

const kern_ops_t *kern_ops_named(const char *name) {
    return name ? kern_ops_isa(s_isa_of(name)) : NULL;
}

const kern_ops_t *kern_ops_best(void) {
    const kern_ops_t *best = s_isa[KERN_ISA_scalar].tab;
    for (int i = KERN_ISA_COUNT - 1; i > KERN_ISA_scalar; i--)
        if (s_runs(i)) {
            best = s_isa[i].tab;
            break;
        }
    const char *e = getenv("STRATA_KERNELS");
    if (e == NULL || *e == 0)
        return best;
    const int isa = s_isa_of(e);
    const kern_ops_t *o = kern_ops_isa(isa);
    if (o)
        return o;
    /* said once per process: callers ask for the table at every model load */
    static atomic_flag s_warned = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&s_warned))
        return best;
    if (isa < 0) {
        char names[128] = "";
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     s_isa[i].name);
        LOG_W(TAG, "STRATA_KERNELS=%s is no kernel table (valid: %s); using %s", e, names,
              best->name);
    } else {
        LOG_W(TAG, "STRATA_KERNELS=%s: this CPU cannot run that table; using %s", e, best->name);
    }
    return best;
}

/* The default of kern_prefetch_bytes for this CPU (kern_ops.h says why). */
static int s_prefetch_default(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return 8192;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* AuthenticAMD */
    if (!amd || !__get_cpuid(1, &a, &b, &c, &d))
        return 8192;
    const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? (a >> 20) & 0xFF : 0);
    return family >= 0x19 ? 0 : 8192;
#else
    return 0;
#endif
}

int kern_prefetch_bytes(void) {
    static atomic_int s_pf = -1;
    int v = atomic_load(&s_pf);
    if (v >= 0)
        return v;
    v = s_prefetch_default();
    const char *e = getenv("STRATA_PREFETCH");
    bool bad = false;
    if (e && *e) {
        char *end;
        const long n = strtol(e, &end, 10);
        bad = *end || n < 0 || n > (1 << 20);
        if (!bad)
            v = (int)n & ~63;
    }
    int unset = -1; /* the first thread to get here decides (and warns) for all */
    if (atomic_compare_exchange_strong(&s_pf, &unset, v) && bad)
        LOG_W(TAG, "STRATA_PREFETCH=%s is not a byte count in 0..1048576; using %d", e, v);
    return atomic_load(&s_pf);
}

const kern_ops_t *kern_ops_ref(void) {
    return kern_ops_isa(KERN_ISA_scalar);
}

const kern_ops_t *kern_ops_avx2(void) {
    return kern_ops_named("avx2");
}

const kern_ops_t *kern_ops_avxvnni(void) {
    return kern_ops_named("avxvnni");
}

const kern_ops_t *kern_ops_avx512(void) {
    return kern_ops_named("avx512");
}
