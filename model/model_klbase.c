/* model_klbase.c - reads llama.cpp's KL-divergence base file (layout in model_klbase.h).
 * Owns the open file and the token list; rows are read on demand (one chunk of a 49k
 * vocabulary at n_ctx 512 is 25 MB). */
#include "model_klbase.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KLBASE_HEADER 20 /* magic, n_ctx, n_vocab, n_chunk */

struct model_klbase_t {
    FILE *f;         /* the open file */
    int n_ctx;       /* tokens per chunk */
    int n_vocab;     /* vocabulary size */
    int n_chunks;    /* chunks in the file */
    int n_rows;      /* scored rows per chunk */
    size_t nv;       /* uint16 per row: 4 (scale, min) + n_vocab rounded up to even */
    long long data;  /* file offset of the first row */
    int32_t *tokens; /* (n_chunks * n_ctx) */
    uint16_t *row;   /* (nv) read buffer */
};

static void s_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint32_t s_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float s_f32(const uint16_t *p) {
    uint32_t b = (uint32_t)p[0] | (uint32_t)p[1] << 16; /* little-endian host assumed */
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

model_klbase_t *model_klbase_open(const char *path, char *err, size_t errlen) {
    model_klbase_t *self = calloc(1, sizeof *self);
    uint8_t hdr[KLBASE_HEADER];
    struct stat st;
    if (!self) {
        s_err(err, errlen, "out of memory");
        return NULL;
    }
    self->f = fopen(path, "rb");
    if (!self->f) {
        s_err(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fileno(self->f), &st) || fread(hdr, sizeof hdr, 1, self->f) != 1) {
        s_err(err, errlen, "'%s': shorter than the %d-byte header", path, KLBASE_HEADER);
        goto fail;
    }
    if (memcmp(hdr, "_logits_", 8)) {
        s_err(err, errlen,
              "'%s' is not a llama-perplexity --kl-divergence-base file (no \"_logits_\" magic)",
              path);
        goto fail;
    }
    uint32_t n_ctx = s_u32(hdr + 8), n_vocab = s_u32(hdr + 12), n_chunks = s_u32(hdr + 16);
    /* as read by llama.cpp: n_vocab and n_chunk are int32, so the top bit is a sign */
    if (n_ctx < 4 || n_ctx > (1u << 20) || n_vocab < 2 || n_vocab > (1u << 24) || n_chunks < 1 ||
        n_chunks > (1u << 20)) {
        s_err(err, errlen, "'%s': implausible header: n_ctx %u, n_vocab %u, n_chunk %u", path,
              n_ctx, n_vocab, n_chunks);
        goto fail;
    }
    self->n_ctx = (int)n_ctx;
    self->n_vocab = (int)n_vocab;
    self->n_chunks = (int)n_chunks;
    self->n_rows = self->n_ctx - 1 - self->n_ctx / 2;
    self->nv = 2 * (((size_t)n_vocab + 1) / 2) + 4;
    size_t n_tok = (size_t)n_ctx * n_chunks;
    self->data = KLBASE_HEADER + (long long)(n_tok * sizeof(int32_t));
    long long want =
        self->data + (long long)n_chunks * self->n_rows * (long long)(self->nv * sizeof(uint16_t));
    if ((long long)st.st_size != want) {
        s_err(err, errlen,
              "'%s': %lld bytes, but n_ctx %d, n_vocab %d, n_chunk %d make %lld (truncated, or "
              "not this format)",
              path, (long long)st.st_size, self->n_ctx, self->n_vocab, self->n_chunks, want);
        goto fail;
    }
    self->tokens = malloc(n_tok * sizeof *self->tokens);
    self->row = malloc(self->nv * sizeof *self->row);
    if (!self->tokens || !self->row) {
        s_err(err, errlen, "out of memory");
        goto fail;
    }
    if (fread(self->tokens, sizeof *self->tokens, n_tok, self->f) != n_tok) {
        s_err(err, errlen, "'%s': cannot read the tokens", path);
        goto fail;
    }
    for (size_t i = 0; i < n_tok; i++)
        if (self->tokens[i] < 0 || self->tokens[i] >= self->n_vocab) {
            s_err(err, errlen, "'%s': token %zu is %d, outside the vocabulary of %d", path, i,
                  (int)self->tokens[i], self->n_vocab);
            goto fail;
        }
    return self;
fail:
    model_klbase_destroy(&self);
    return NULL;
}

void model_klbase_destroy(model_klbase_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_klbase_t *self = *self_p;
    if (self->f)
        fclose(self->f);
    free(self->tokens);
    free(self->row);
    free(self);
    *self_p = NULL;
}

int model_klbase_n_ctx(const model_klbase_t *self) {
    return self->n_ctx;
}
int model_klbase_n_vocab(const model_klbase_t *self) {
    return self->n_vocab;
}
int model_klbase_n_chunks(const model_klbase_t *self) {
    return self->n_chunks;
}
int model_klbase_n_rows(const model_klbase_t *self) {
    return self->n_rows;
}
const int32_t *model_klbase_tokens(const model_klbase_t *self) {
    return self->tokens;
}

int model_klbase_row(model_klbase_t *self, int chunk, int row, float *logp) {
    if (chunk < 0 || chunk >= self->n_chunks || row < 0 || row >= self->n_rows)
        return -EINVAL;
    long long off =
        self->data + ((long long)chunk * self->n_rows + row) * (long long)(self->nv * 2);
    if (fseeko(self->f, (off_t)off, SEEK_SET) ||
        fread(self->row, sizeof *self->row, self->nv, self->f) != self->nv)
        return -EIO;
    const float scale = s_f32(self->row), min_lp = s_f32(self->row + 2);
    if (!isfinite(scale) || !isfinite(min_lp) || scale < 0)
        return -EPROTO;
    const uint16_t *u = self->row + 4;
    for (int v = 0; v < self->n_vocab; v++)
        logp[v] = scale * u[v] + min_lp;
    return 0;
}
