/* kv_ssd.c - T2 of the KV store: fixed-size slots in preallocated files,
 * O_DIRECT + io_uring with registered buffers (see kv_ssd.h).  Owns the files,
 * the ring, one registered buffer per request and the slot table.
 */
#include "kv_ssd.h"

#include "base_clock.h"
#include "base_fifo.h"
#include "base_log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define TAG "kv_ssd"
#define S_MAGIC 0x31544f4c5353564bull /* "KVSSLOT1" little-endian */
#define S_VERSION 1u
#define S_MAX_RETRIES 64 /* -EAGAIN / short transfers resubmitted per request */
#define S_DEFAULT_QD 64

/* ---- on-disk slot header (host byte order; the first KV_SSD_ALIGN bytes of a slot) */

typedef struct {
    uint64_t magic;                      /* S_MAGIC */
    uint64_t cookie;                     /* the caller's layout id (kv_ssd_config_t.cookie) */
    uint64_t hash;                       /* the block's hash (never 0) */
    uint64_t parent;                     /* its parent's hash */
    uint64_t seq;                        /* write sequence number: the newest copy of a hash wins */
    uint64_t payload_sum;                /* XXH3-64 of the payload_bytes that follow the header */
    uint32_t version;                    /* S_VERSION */
    uint32_t slot;                       /* slot index (catches data written at another offset) */
    uint32_t slot_bytes;                 /* slot size when written (catches a geometry change) */
    uint32_t payload_bytes;              /* payload length (<= payload_max) */
    int32_t n_tokens;                    /* 1..KV_MAX_BLOCK_TOKENS */
    int32_t pin;                         /* 0..255 */
    int32_t fmt;                         /* the caller's payload format */
    uint32_t reserved;                   /* 0 */
    int32_t tokens[KV_MAX_BLOCK_TOKENS]; /* (n_tokens), zeros after */
    uint64_t header_sum;                 /* XXH3-64 of every byte above */
} s_header_t;
static_assert(sizeof(s_header_t) == 6 * 8 + 8 * 4 + 4 * KV_MAX_BLOCK_TOKENS + 8,
              "s_header_t has no padding");
static_assert(sizeof(s_header_t) <= KV_SSD_ALIGN, "the header fits its 4096-byte block");

/* ---- slots and requests */

typedef enum {
    S_FREE = 0,  /* on the free stack */
    S_USED = 1,  /* owned by the caller */
    S_LIMBO = 2, /* given up (by the caller or a bad checksum) with I/O or an erase pending */
} s_slot_state_t;

typedef struct {
    kv_ssd_info_t info; /* the block in the slot (or being written into it) */
    uint8_t state;      /* s_slot_state_t */
    bool valid;         /* holds a block (found at open or written successfully) */
    bool writing;       /* a write is queued or in flight: reads wait for it */
    bool erase_pending; /* a bad block's header is to be erased before reuse */
    uint16_t io;        /* requests on this slot queued or in flight */
} s_slot_t;

enum { S_OP_SCAN = 3, S_OP_ERASE = 4 }; /* internal ops beside KV_SSD_READ / KV_SSD_WRITE */

typedef enum { R_FREE, R_QUEUED, R_INFLIGHT, R_DONE, R_RETURNED } s_req_state_t;

/* One I/O: travels in the SQE's user_data and owns registered buffer id. */
typedef struct s_req_t {
    int id;    /* index of the request and of its registered buffer */
    int op;    /* KV_SSD_READ, KV_SSD_WRITE, S_OP_SCAN, S_OP_ERASE */
    int state; /* s_req_state_t */
    int slot;
    uint64_t tag;          /* the caller's */
    uint8_t *buf;          /* (slot_bytes) header then payload */
    size_t len;            /* bytes to transfer */
    size_t off;            /* bytes transferred so far (short transfers continue here) */
    int retries;           /* resubmissions so far */
    int status;            /* 0 or negative errno once finished */
    bool sealed;           /* write: checksums computed */
    bool erase_after;      /* read found a bad block: erase its header when released */
    size_t bytes;          /* payload bytes */
    int fmt;               /* payload format */
    kv_meta_t meta;        /* read: from the header; write: what is written */
    struct s_req_t *next;  /* free stack link */
    base_fifo_link_t link; /* queued, done or returned list */
} s_req_t;

typedef base_fifo_t s_list_t; /* of s_req_t, through link */

struct kv_ssd_t {
    struct io_uring ring;      /* one ring: SQ of queue_depth entries */
    bool ring_ok;              /* ring initialised */
    int fds[KV_SSD_MAX_FILES]; /* the data files */
    int n_files;
    bool direct;        /* opened O_DIRECT */
    bool fixed_bufs;    /* buffers registered (READ_FIXED / WRITE_FIXED) */
    bool fixed_files;   /* files registered (IOSQE_FIXED_FILE) */
    int n_slots;        /* capacity */
    size_t payload_max; /* largest payload */
    size_t slot_bytes;  /* KV_SSD_ALIGN + payload_max rounded up to KV_SSD_ALIGN */
    int qd;             /* requests = registered buffers = ring entries */
    uint64_t cookie;    /* layout id written into every header */
    uint64_t next_seq;  /* sequence number of the next write */
    s_slot_t *slots;    /* (n_slots) */
    int *free_stack;    /* (n_slots) free slot ids; top at n_free - 1 */
    int n_free;
    int used;          /* slots in S_USED */
    int recovered;     /* blocks found at open */
    uint8_t *bufs;     /* (qd, slot_bytes), KV_SSD_ALIGN-aligned */
    s_req_t *reqs;     /* (qd) */
    s_req_t *req_free; /* stack of free requests */
    int n_req_free;
    s_list_t queued;       /* to submit (new, resubmissions, reads waiting for a write) */
    s_list_t done;         /* finished, not yet returned by poll */
    s_list_t returned;     /* returned by the last poll; released at the next */
    s_list_t returned_now; /* scratch: returned requests with no buffer to keep */
    int n_done;            /* length of done */
    int active;            /* requests queued or in flight */
    int inflight;          /* SQEs prepared and not yet reaped */
};

static atomic_bool s_warned_buffered;

static void s_err(char *err, size_t errlen, const char *fmt, const char *a, int e) {
    if (err && errlen)
        snprintf(err, errlen, fmt, a, strerror(e));
}

static size_t s_round_up(size_t n) {
    return (n + KV_SSD_ALIGN - 1) / KV_SSD_ALIGN * KV_SSD_ALIGN;
}

static void s_list_push(s_list_t *l, s_req_t *r) {
    base_fifo_push(l, &r->link);
}

static s_req_t *s_list_pop(s_list_t *l) {
    return BASE_FIFO_ENTRY(base_fifo_pop(l), s_req_t, link);
}

/* ---- slot bookkeeping */

/* A slot in limbo becomes free once nothing is pending on it. */
static void s_slot_settle(kv_ssd_t *self, int slot) {
    s_slot_t *s = &self->slots[slot];
    if (s->state == S_LIMBO && s->io == 0 && !s->erase_pending) {
        s->state = S_FREE;
        s->valid = false;
        self->free_stack[self->n_free++] = slot;
    }
}

/* Take a slot out of the caller's hands (freed, or found bad). */
static void s_slot_give_up(kv_ssd_t *self, int slot) {
    s_slot_t *s = &self->slots[slot];
    assert(s->state == S_USED);
    s->state = S_LIMBO;
    s->valid = false;
    self->used--;
    s_slot_settle(self, slot);
}

/* ---- requests */

static s_req_t *s_req_take(kv_ssd_t *self, int op, int slot, uint64_t tag) {
    s_req_t *r = self->req_free;
    if (!r)
        return NULL;
    self->req_free = r->next;
    self->n_req_free--;
    r->next = NULL;
    r->op = op;
    r->state = R_QUEUED;
    r->slot = slot;
    r->tag = tag;
    r->len = r->off = 0;
    r->retries = 0;
    r->status = 0;
    r->sealed = false;
    r->erase_after = false;
    r->bytes = 0;
    r->fmt = 0;
    self->slots[slot].io++;
    self->active++;
    return r;
}

static void s_req_release(kv_ssd_t *self, s_req_t *r) {
    r->state = R_FREE;
    r->next = self->req_free;
    self->req_free = r;
    self->n_req_free++;
}

static void s_header_seal(s_header_t *h) {
    h->header_sum = XXH3_64bits(h, offsetof(s_header_t, header_sum));
}

/* Is h a header this kv_ssd wrote into slot?  (Not the payload.) */
static bool s_header_ok(const kv_ssd_t *self, const s_header_t *h, int slot) {
    if (h->magic != S_MAGIC || h->version != S_VERSION || h->cookie != self->cookie ||
        h->slot != (uint32_t)slot || h->slot_bytes != self->slot_bytes)
        return false;
    if (h->header_sum != XXH3_64bits(h, offsetof(s_header_t, header_sum)))
        return false;
    return h->payload_bytes <= self->payload_max && h->n_tokens >= 1 &&
           h->n_tokens <= KV_MAX_BLOCK_TOKENS && h->pin >= 0 && h->pin <= 255 && h->hash != 0;
}

static void s_meta_from_header(kv_meta_t *m, const s_header_t *h) {
    m->hash = h->hash;
    m->parent = h->parent;
    m->n_tokens = h->n_tokens;
    m->pin = h->pin;
    memcpy(m->tokens, h->tokens, sizeof m->tokens);
}

/* Write: checksum the payload the caller filled in and seal the header. */
static void s_write_seal(kv_ssd_t *self, s_req_t *r) {
    s_header_t *h = (s_header_t *)r->buf;
    uint8_t *payload = r->buf + KV_SSD_ALIGN;
    size_t padded = s_round_up(r->bytes);
    memset(payload + r->bytes, 0, padded - r->bytes);
    h->payload_sum = XXH3_64bits(payload, r->bytes);
    s_header_seal(h);
    r->sealed = true;
    (void)self;
}

static void s_prep(kv_ssd_t *self, s_req_t *r, struct io_uring_sqe *sqe) {
    int file = r->slot % self->n_files;
    off_t off = (off_t)(r->slot / self->n_files) * (off_t)self->slot_bytes + (off_t)r->off;
    uint8_t *p = r->buf + r->off;
    unsigned n = (unsigned)(r->len - r->off);
    int fd = self->fixed_files ? file : self->fds[file];
    bool wr = r->op == KV_SSD_WRITE || r->op == S_OP_ERASE;
    if (self->fixed_bufs) {
        if (wr)
            io_uring_prep_write_fixed(sqe, fd, p, n, off, r->id);
        else
            io_uring_prep_read_fixed(sqe, fd, p, n, off, r->id);
    } else {
        if (wr)
            io_uring_prep_write(sqe, fd, p, n, off);
        else
            io_uring_prep_read(sqe, fd, p, n, off);
    }
    if (self->fixed_files)
        io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data(sqe, r);
}

/* Turn every queued request that may go (a read waits while its slot is
 * being written) into an SQE and submit them all at once.  0 or -errno. */
static int s_submit(kv_ssd_t *self) {
    s_list_t keep = {0};
    s_req_t *r;
    while ((r = s_list_pop(&self->queued))) {
        if (r->op == KV_SSD_READ && self->slots[r->slot].writing) {
            s_list_push(&keep, r);
            continue;
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);
        if (!sqe) { /* cannot happen (requests <= SQ entries); try again next time */
            s_list_push(&keep, r);
            continue;
        }
        if (r->op == KV_SSD_WRITE && !r->sealed)
            s_write_seal(self, r);
        s_prep(self, r, sqe);
        r->state = R_INFLIGHT;
        self->inflight++;
    }
    self->queued = keep;
    if (io_uring_sq_ready(&self->ring) == 0)
        return 0;
    int rc = io_uring_submit(&self->ring);
    if (rc == -EAGAIN || rc == -EBUSY || rc == -EINTR)
        return 0; /* the SQEs stay in the ring for the next submit */
    return rc < 0 ? rc : 0;
}

/* Scan: a header read at open. */
static void s_scan_done(kv_ssd_t *self, s_req_t *r) {
    s_slot_t *s = &self->slots[r->slot];
    const s_header_t *h = (const s_header_t *)r->buf;
    if (r->status == 0 && s_header_ok(self, h, r->slot)) {
        s->state = S_USED;
        s->valid = true;
        s->info = (kv_ssd_info_t){.hash = h->hash,
                                  .parent = h->parent,
                                  .seq = h->seq,
                                  .n_tokens = h->n_tokens,
                                  .pin = h->pin,
                                  .fmt = h->fmt,
                                  .bytes = h->payload_bytes};
        if (h->seq >= self->next_seq)
            self->next_seq = h->seq + 1;
    } else if (r->status < 0) {
        LOG_W(TAG, "reading the header of slot %d: %s", r->slot, strerror(-r->status));
    }
}

/* Read: check the header against the slot and the payload against its sum. */
static int s_read_verify(kv_ssd_t *self, s_req_t *r) {
    const s_header_t *h = (const s_header_t *)r->buf;
    const s_slot_t *s = &self->slots[r->slot];
    if (!s_header_ok(self, h, r->slot) || h->hash != s->info.hash ||
        h->payload_bytes != s->info.bytes)
        return -EBADMSG;
    if (XXH3_64bits(r->buf + KV_SSD_ALIGN, h->payload_bytes) != h->payload_sum)
        return -EBADMSG;
    s_meta_from_header(&r->meta, h);
    r->fmt = h->fmt;
    r->bytes = h->payload_bytes;
    return 0;
}

/* A request is finished (status set): account for it by op. */
static void s_finish(kv_ssd_t *self, s_req_t *r) {
    s_slot_t *s = &self->slots[r->slot];
    assert(s->io > 0);
    s->io--;
    self->active--;
    switch (r->op) {
    case S_OP_SCAN:
        s_scan_done(self, r);
        s_req_release(self, r);
        return;
    case S_OP_ERASE:
        if (r->status < 0)
            LOG_W(TAG, "erasing slot %d: %s", r->slot, strerror(-r->status));
        s_req_release(self, r);
        s_slot_settle(self, r->slot);
        return;
    case KV_SSD_WRITE:
        s->writing = false;
        s->valid = r->status == 0 && s->state == S_USED;
        if (r->status < 0)
            LOG_W(TAG, "writing slot %d: %s", r->slot, strerror(-r->status));
        break;
    case KV_SSD_READ:
        if (r->status == 0)
            r->status = s_read_verify(self, r);
        if (r->status == -EBADMSG) {
            LOG_W(TAG, "slot %d: checksum mismatch, block dropped", r->slot);
            if (!s->erase_pending && s->state != S_FREE) {
                s->erase_pending = true; /* the header goes when this request is released */
                r->erase_after = true;
            }
            if (s->state == S_USED)
                s_slot_give_up(self, r->slot);
        } else if (r->status < 0) {
            LOG_W(TAG, "reading slot %d: %s", r->slot, strerror(-r->status));
        }
        break;
    }
    s_slot_settle(self, r->slot);
    r->state = R_DONE;
    s_list_push(&self->done, r);
    self->n_done++;
}

/* One CQE: resubmit on -EAGAIN or a short transfer, else finish. */
static void s_complete(kv_ssd_t *self, s_req_t *r, int res) {
    self->inflight--;
    if (res == -EAGAIN || res == -EINTR) {
        if (++r->retries <= S_MAX_RETRIES) {
            r->state = R_QUEUED;
            s_list_push(&self->queued, r);
            return;
        }
        res = -EIO;
    }
    if (res > 0) {
        r->off += (size_t)res;
        if (r->off < r->len) { /* short transfer: the rest goes next */
            if (++r->retries <= S_MAX_RETRIES) {
                r->state = R_QUEUED;
                s_list_push(&self->queued, r);
                return;
            }
            res = -EIO;
        }
    } else if (res == 0 && r->off < r->len) {
        res = -EIO; /* end of file where a slot should be */
    }
    r->status = res < 0 ? res : 0;
    s_finish(self, r);
}

static int s_reap(kv_ssd_t *self) {
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&self->ring, head, cqe) {
        s_complete(self, io_uring_cqe_get_data(cqe), cqe->res);
        n++;
    }
    io_uring_cq_advance(&self->ring, n);
    return (int)n;
}

/* Requests returned by the last poll go back to the free stack (a bad
 * block's request first erases the slot's header). */
static void s_release_list(kv_ssd_t *self, s_list_t *l) {
    s_req_t *r;
    while ((r = s_list_pop(l))) {
        if (r->erase_after) {
            s_slot_t *s = &self->slots[r->slot];
            memset(r->buf, 0, KV_SSD_ALIGN);
            r->op = S_OP_ERASE;
            r->state = R_QUEUED;
            r->len = KV_SSD_ALIGN;
            r->off = 0;
            r->retries = 0;
            r->status = 0;
            r->erase_after = false;
            s->io++;
            s->erase_pending = false;
            self->active++;
            s_list_push(&self->queued, r);
        } else {
            s_req_release(self, r);
        }
    }
}

static void s_release_returned(kv_ssd_t *self) {
    s_release_list(self, &self->returned);
}

/* Wait until a CQE is available or timeout_us passes (0: no limit).
 * 0, -ETIME or -errno. */
static int s_wait(kv_ssd_t *self, int64_t timeout_us) {
    struct io_uring_cqe *cqe;
    if (timeout_us <= 0)
        return io_uring_wait_cqe(&self->ring, &cqe);
    struct __kernel_timespec ts = {.tv_sec = timeout_us / 1000000,
                                   .tv_nsec = (timeout_us % 1000000) * 1000};
    return io_uring_wait_cqe_timeout(&self->ring, &cqe, &ts);
}

/* Submit and reap until nothing is active.  Used at open and destroy. */
static int s_drain(kv_ssd_t *self) {
    while (self->active > 0) {
        int rc = s_submit(self);
        if (rc < 0)
            return rc;
        if (self->inflight == 0)
            return -EDEADLK; /* only held-back reads left: cannot happen */
        rc = s_wait(self, 0);
        if (rc < 0 && rc != -EINTR && rc != -ETIME)
            return rc;
        s_reap(self);
    }
    return 0;
}

/* ---- open: files, ring, buffers, scan */

static int s_open_files(kv_ssd_t *self, const char *dir, char *err, size_t errlen) {
    for (int i = 0; i < self->n_files; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/kv-ssd-%02d.dat", dir, i);
        int flags = O_RDWR | O_CREAT | O_CLOEXEC | (self->direct ? O_DIRECT : 0);
        int fd = open(path, flags, 0644);
        if (fd < 0 && errno == EINVAL && self->direct)
            return -EINVAL; /* no O_DIRECT here: the caller retries buffered */
        if (fd < 0) {
            s_err(err, errlen, "kv_ssd: open %s: %s", path, errno);
            return -errno;
        }
        self->fds[i] = fd;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            s_err(err, errlen, "kv_ssd: %s is in use by another store (%s)", path, errno);
            return -EBUSY;
        }
        off_t want = (off_t)((self->n_slots - i + self->n_files - 1) / self->n_files) *
                     (off_t)self->slot_bytes;
        struct stat st;
        if (fstat(fd, &st) < 0) {
            s_err(err, errlen, "kv_ssd: stat %s: %s", path, errno);
            return -errno;
        }
        if (st.st_size > want && ftruncate(fd, want) < 0) {
            s_err(err, errlen, "kv_ssd: truncate %s: %s", path, errno);
            return -errno;
        }
        if (st.st_size < want && fallocate(fd, 0, 0, want) < 0 && ftruncate(fd, want) < 0) {
            s_err(err, errlen, "kv_ssd: preallocate %s: %s", path, errno);
            return -errno;
        }
    }
    if (self->direct) { /* some filesystems accept the flag and refuse the I/O */
        ssize_t n = pread(self->fds[0], self->bufs, KV_SSD_ALIGN, 0);
        if (n < 0 && errno == EINVAL)
            return -EINVAL;
    }
    return 0;
}

static void s_close_files(kv_ssd_t *self) {
    for (int i = 0; i < self->n_files; i++) {
        if (self->fds[i] < 0)
            continue;
        /* the ring drops its file references asynchronously: unlock now so
         * that a new kv_ssd on the same directory can open at once */
        flock(self->fds[i], LOCK_UN);
        close(self->fds[i]);
        self->fds[i] = -1;
    }
}

static int s_cmp_dup(const void *a, const void *b) {
    const int64_t *x = a, *y = b; /* (hash, seq, slot) triples */
    if ((uint64_t)x[0] != (uint64_t)y[0])
        return (uint64_t)x[0] < (uint64_t)y[0] ? -1 : 1;
    if ((uint64_t)x[1] != (uint64_t)y[1])
        return (uint64_t)x[1] > (uint64_t)y[1] ? -1 : 1; /* newest first */
    return 0;
}

/* Read every slot header, queue_depth at a time, then keep the newest copy of
 * each hash.  0 or -errno. */
static int s_scan(kv_ssd_t *self) {
    int next = 0;
    while (next < self->n_slots || self->active > 0) {
        while (next < self->n_slots && self->req_free) {
            s_req_t *r = s_req_take(self, S_OP_SCAN, next++, 0);
            r->len = KV_SSD_ALIGN;
            s_list_push(&self->queued, r);
        }
        int rc = s_submit(self);
        if (rc < 0)
            return rc;
        rc = s_wait(self, 0);
        if (rc < 0 && rc != -EINTR && rc != -ETIME)
            return rc;
        s_reap(self);
    }
    int n = 0;
    for (int i = 0; i < self->n_slots; i++)
        n += self->slots[i].state == S_USED;
    if (n > 0) {
        int64_t *t = malloc((size_t)n * 3 * sizeof *t);
        if (!t)
            return -ENOMEM;
        int k = 0;
        for (int i = 0; i < self->n_slots; i++) {
            if (self->slots[i].state != S_USED)
                continue;
            t[3 * k] = (int64_t)self->slots[i].info.hash;
            t[3 * k + 1] = (int64_t)self->slots[i].info.seq;
            t[3 * k + 2] = i;
            k++;
        }
        qsort(t, (size_t)n, 3 * sizeof *t, s_cmp_dup);
        for (int j = 1; j < n; j++) {
            if (t[3 * j] != t[3 * (j - 1)])
                continue;
            s_slot_t *s = &self->slots[t[3 * j + 2]]; /* an older copy */
            s->state = S_FREE;
            s->valid = false;
        }
        free(t);
    }
    self->n_free = 0;
    self->used = 0;
    for (int i = self->n_slots - 1; i >= 0; i--) {
        if (self->slots[i].state == S_FREE)
            self->free_stack[self->n_free++] = i;
        else
            self->used++;
    }
    self->recovered = self->used;
    return 0;
}

kv_ssd_t *kv_ssd_new(const kv_ssd_config_t *c, char *err, size_t errlen) {
    if (err && errlen)
        err[0] = '\0';
    if (!c || !c->dir || !c->dir[0] || c->n_slots < 1 || c->payload_max < 1 ||
        c->payload_max > (size_t)1 << 30 || c->queue_depth < 0 || c->queue_depth > 4096 ||
        c->n_files < 0 || c->n_files > KV_SSD_MAX_FILES) {
        if (err && errlen)
            snprintf(err, errlen, "kv_ssd: bad configuration");
        return NULL;
    }
    kv_ssd_t *self = calloc(1, sizeof *self);
    if (!self)
        goto nomem;
    for (int i = 0; i < KV_SSD_MAX_FILES; i++)
        self->fds[i] = -1;
    self->n_files = c->n_files ? c->n_files : 1;
    if (self->n_files > c->n_slots)
        self->n_files = c->n_slots;
    self->n_slots = c->n_slots;
    self->payload_max = c->payload_max;
    self->slot_bytes = KV_SSD_ALIGN + s_round_up(c->payload_max);
    self->qd = c->queue_depth ? c->queue_depth : S_DEFAULT_QD;
    self->cookie = c->cookie;
    self->next_seq = 1;
    self->slots = calloc((size_t)self->n_slots, sizeof *self->slots);
    self->free_stack = malloc((size_t)self->n_slots * sizeof *self->free_stack);
    self->reqs = calloc((size_t)self->qd, sizeof *self->reqs);
    if (!self->slots || !self->free_stack || !self->reqs ||
        posix_memalign((void **)&self->bufs, KV_SSD_ALIGN, (size_t)self->qd * self->slot_bytes))
        goto nomem;
    for (int i = self->qd - 1; i >= 0; i--) {
        s_req_t *r = &self->reqs[i];
        r->id = i;
        r->buf = self->bufs + (size_t)i * self->slot_bytes;
        s_req_release(self, r);
    }

    if (mkdir(c->dir, 0755) < 0 && errno != EEXIST) {
        s_err(err, errlen, "kv_ssd: mkdir %s: %s", c->dir, errno);
        goto fail;
    }
    self->direct = !c->buffered;
    int rc = s_open_files(self, c->dir, err, errlen);
    if (rc == -EINVAL && self->direct) {
        s_close_files(self);
        self->direct = false;
        if (!atomic_exchange(&s_warned_buffered, true))
            LOG_W(TAG, "%s refuses O_DIRECT: using buffered I/O", c->dir);
        rc = s_open_files(self, c->dir, err, errlen);
    }
    if (rc < 0)
        goto fail;

    rc = io_uring_queue_init((unsigned)self->qd, &self->ring, 0);
    if (rc < 0) {
        s_err(err, errlen, "kv_ssd: io_uring_queue_init (%s): %s", c->dir, -rc);
        goto fail;
    }
    self->ring_ok = true;
    struct iovec *iov = malloc((size_t)self->qd * sizeof *iov);
    if (!iov)
        goto nomem;
    for (int i = 0; i < self->qd; i++)
        iov[i] = (struct iovec){.iov_base = self->reqs[i].buf, .iov_len = self->slot_bytes};
    rc = io_uring_register_buffers(&self->ring, iov, (unsigned)self->qd);
    free(iov);
    self->fixed_bufs = rc == 0;
    if (rc < 0)
        LOG_W(TAG, "io_uring_register_buffers: %s: plain reads and writes", strerror(-rc));
    self->fixed_files =
        io_uring_register_files(&self->ring, self->fds, (unsigned)self->n_files) == 0;

    rc = s_scan(self);
    if (rc < 0) {
        s_err(err, errlen, "kv_ssd: scanning %s: %s", c->dir, -rc);
        goto fail;
    }
    LOG_I(TAG, "%s: %d slots of %zu bytes in %d file(s), %s, %d blocks found", c->dir,
          self->n_slots, self->slot_bytes, self->n_files, self->direct ? "O_DIRECT" : "buffered",
          self->recovered);
    return self;

nomem:
    if (err && errlen)
        snprintf(err, errlen, "kv_ssd: out of memory");
fail:
    kv_ssd_destroy(&self);
    return NULL;
}

void kv_ssd_destroy(kv_ssd_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_ssd_t *self = *self_p;
    if (self->ring_ok) {
        s_req_t *r;
        while ((r = s_list_pop(&self->done))) { /* unreturned: release (and erase) too */
            self->n_done--;
            s_list_push(&self->returned, r);
        }
        s_release_returned(self);
        int rc = s_drain(self);
        if (rc < 0)
            LOG_E(TAG, "waiting for I/O at close: %s", strerror(-rc));
        if (self->fixed_files)
            io_uring_unregister_files(&self->ring);
        io_uring_queue_exit(&self->ring);
    }
    for (int i = 0; i < self->n_files; i++)
        if (self->fds[i] >= 0)
            fdatasync(self->fds[i]);
    s_close_files(self);
    free(self->bufs);
    free(self->reqs);
    free(self->free_stack);
    free(self->slots);
    free(self);
    *self_p = NULL;
}

/* ---- queries */

bool kv_ssd_direct(const kv_ssd_t *self) {
    return self->direct;
}
bool kv_ssd_fixed(const kv_ssd_t *self) {
    return self->fixed_bufs;
}
int kv_ssd_capacity(const kv_ssd_t *self) {
    return self->n_slots;
}
size_t kv_ssd_slot_bytes(const kv_ssd_t *self) {
    return self->slot_bytes;
}
int kv_ssd_queue_depth(const kv_ssd_t *self) {
    return self->qd;
}
int kv_ssd_used(const kv_ssd_t *self) {
    return self->used;
}
int kv_ssd_recovered(const kv_ssd_t *self) {
    return self->recovered;
}
int kv_ssd_pending(const kv_ssd_t *self) {
    return self->active + self->n_done;
}
int kv_ssd_free_requests(const kv_ssd_t *self) {
    return self->n_req_free;
}

/* ---- slots */

int kv_ssd_alloc(kv_ssd_t *self) {
    if (self->n_free == 0)
        return -ENOSPC;
    int slot = self->free_stack[--self->n_free];
    s_slot_t *s = &self->slots[slot];
    assert(s->state == S_FREE && s->io == 0);
    s->state = S_USED;
    s->valid = false;
    s->writing = false;
    memset(&s->info, 0, sizeof s->info);
    self->used++;
    return slot;
}

int kv_ssd_free(kv_ssd_t *self, int slot) {
    if (slot < 0 || slot >= self->n_slots || self->slots[slot].state != S_USED)
        return -EINVAL;
    s_slot_give_up(self, slot);
    return 0;
}

bool kv_ssd_slot_info(const kv_ssd_t *self, int slot, kv_ssd_info_t *out) {
    if (slot < 0 || slot >= self->n_slots)
        return false;
    const s_slot_t *s = &self->slots[slot];
    if (s->state != S_USED || !s->valid)
        return false;
    if (out)
        *out = s->info;
    return true;
}

/* ---- I/O */

int kv_ssd_write_prep(kv_ssd_t *self, int slot, const kv_meta_t *meta, int fmt, size_t len,
                      uint64_t tag, void **payload) {
    if (slot < 0 || slot >= self->n_slots || self->slots[slot].state != S_USED || !meta ||
        !payload || len > self->payload_max || meta->hash == 0 || meta->n_tokens < 1 ||
        meta->n_tokens > KV_MAX_BLOCK_TOKENS || meta->pin < 0 || meta->pin > 255)
        return -EINVAL;
    s_slot_t *s = &self->slots[slot];
    if (s->io > 0 || !self->req_free)
        return -EBUSY;
    s_req_t *r = s_req_take(self, KV_SSD_WRITE, slot, tag);
    r->bytes = len;
    r->fmt = fmt;
    r->len = KV_SSD_ALIGN + s_round_up(len);
    r->meta.hash = meta->hash;
    r->meta.parent = meta->parent;
    r->meta.n_tokens = meta->n_tokens;
    r->meta.pin = meta->pin;
    memcpy(r->meta.tokens, meta->tokens, (size_t)meta->n_tokens * sizeof meta->tokens[0]);

    s_header_t *h = (s_header_t *)r->buf;
    memset(r->buf, 0, KV_SSD_ALIGN);
    h->magic = S_MAGIC;
    h->cookie = self->cookie;
    h->hash = meta->hash;
    h->parent = meta->parent;
    h->seq = self->next_seq++;
    h->version = S_VERSION;
    h->slot = (uint32_t)slot;
    h->slot_bytes = (uint32_t)self->slot_bytes;
    h->payload_bytes = (uint32_t)len;
    h->n_tokens = meta->n_tokens;
    h->pin = meta->pin;
    h->fmt = fmt;
    memcpy(h->tokens, meta->tokens, (size_t)meta->n_tokens * sizeof h->tokens[0]);

    s->info = (kv_ssd_info_t){.hash = meta->hash,
                              .parent = meta->parent,
                              .seq = h->seq,
                              .n_tokens = meta->n_tokens,
                              .pin = meta->pin,
                              .fmt = fmt,
                              .bytes = len};
    s->valid = false;
    s->writing = true;
    s_list_push(&self->queued, r);
    *payload = r->buf + KV_SSD_ALIGN;
    return 0;
}

int kv_ssd_write(kv_ssd_t *self, int slot, const kv_meta_t *meta, int fmt, const void *data,
                 size_t len, uint64_t tag) {
    if (!data && len)
        return -EINVAL;
    void *p;
    int rc = kv_ssd_write_prep(self, slot, meta, fmt, len, tag, &p);
    if (rc == 0 && len)
        memcpy(p, data, len);
    return rc;
}

int kv_ssd_read(kv_ssd_t *self, int slot, uint64_t tag) {
    if (slot < 0 || slot >= self->n_slots)
        return -EINVAL;
    s_slot_t *s = &self->slots[slot];
    if (s->state != S_USED || (!s->valid && !s->writing))
        return -EINVAL;
    if (!self->req_free)
        return -EBUSY;
    s_req_t *r = s_req_take(self, KV_SSD_READ, slot, tag);
    r->len = KV_SSD_ALIGN + s_round_up(s->info.bytes);
    s_list_push(&self->queued, r);
    return 0;
}

int kv_ssd_poll(kv_ssd_t *self, kv_ssd_done_t *out, int max, int wait_us) {
    s_release_returned(self);
    uint64_t deadline = wait_us > 0 ? base_now_us() + (uint64_t)wait_us : 0;
    for (;;) {
        int rc = s_submit(self);
        if (rc < 0)
            return rc;
        int n = s_reap(self);
        if (n > 0 && self->queued.head)
            continue; /* resubmissions, or reads whose write just finished */
        if (self->done.head || self->inflight == 0 || wait_us <= 0)
            break;
        uint64_t now = base_now_us();
        if (now >= deadline)
            break;
        rc = s_wait(self, (int64_t)(deadline - now));
        if (rc < 0 && rc != -ETIME && rc != -EINTR)
            return rc;
    }
    int n = 0;
    while (n < max && self->done.head) {
        s_req_t *r = s_list_pop(&self->done);
        self->n_done--;
        bool ok = r->op == KV_SSD_READ && r->status == 0;
        out[n++] = (kv_ssd_done_t){.tag = r->tag,
                                   .op = r->op,
                                   .slot = r->slot,
                                   .status = r->status,
                                   .meta = ok ? &r->meta : NULL,
                                   .fmt = r->fmt,
                                   .data = ok ? r->buf + KV_SSD_ALIGN : NULL,
                                   .bytes = r->bytes};
        /* only a read's buffer must live until the next poll; the others
         * are free for new requests at once */
        r->state = R_RETURNED;
        s_list_push(ok ? &self->returned : &self->returned_now, r);
    }
    s_release_list(self, &self->returned_now);
    return n;
}
