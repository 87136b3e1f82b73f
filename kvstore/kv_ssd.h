/* kv_ssd.h - T2 of the KV store: blocks in fixed-size slots of a few
 * preallocated files in one directory, written and read with io_uring.
 *
 * A slot is a 4096-byte header followed by the payload padded to 4096:
 *   header  magic, version, the caller's cookie, slot index and slot size, a
 *           write sequence number, the block's meta (hash, parent, n_tokens,
 *           tokens, pin), its format, payload bytes, XXH3-64 of the payload
 *           and XXH3-64 of the header itself;
 *   payload the block's bytes in that format.
 * Slot s lives in file s % n_files at offset (s / n_files) * slot_bytes.  A
 * block is written and read as one I/O of header + payload.
 *
 * I/O goes through one ring with registered buffers (READ_FIXED/WRITE_FIXED)
 * and, where the kernel allows, registered files; files are opened O_DIRECT
 * unless the filesystem refuses it (then buffered I/O, with one warning per
 * process; kv_ssd_direct says which).  Every request owns one registered
 * buffer of slot_bytes; there are queue_depth of them, so at most queue_depth
 * reads and writes are queued or in flight (more: -EBUSY).  kv_ssd_read and
 * kv_ssd_write only queue; kv_ssd_poll submits everything queued with one
 * io_uring_submit, reaps completions (short transfers and -EAGAIN are resubmitted)
 * and returns the finished requests.  A read of a slot whose write is still
 * in flight is held back until that write completes.
 *
 * Slots: kv_ssd_alloc hands out a free slot, kv_ssd_free gives it back.  The
 * module never evicts: when kv_ssd_alloc says -ENOSPC the caller frees a
 * victim of its choosing.  A slot freed while I/O on it is in flight becomes
 * allocatable when that I/O completes.
 *
 * Integrity: a read verifies the header checksum and the payload checksum; a
 * mismatch completes with -EBADMSG and the module frees the slot itself (and
 * erases its header on disk), so the caller only drops it from its index.
 *
 * Persistence: kv_ssd_new scans every slot header (batched reads) and keeps the
 * slots whose header is intact and whose cookie and geometry match (several
 * copies of one hash: the newest write wins, the others are freed);
 * kv_ssd_slot_info lists them.  Freeing a slot does not erase it on disk, so
 * a block freed but not overwritten reappears after a restart (its content is
 * still the block its hash names).  Not thread-safe: one thread owns it.
 */
#ifndef KV_SSD_H
#define KV_SSD_H

#include "kv_hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_SSD_ALIGN 4096 /* header size, payload padding and O_DIRECT alignment */
#define KV_SSD_MAX_FILES 64

typedef struct kv_ssd_t kv_ssd_t;

typedef struct {
    const char *dir;    /* directory of the data files (created if missing) */
    int n_slots;        /* capacity in blocks (>= 1) */
    size_t payload_max; /* largest payload a slot holds (>= 1) */
    int queue_depth;    /* ring entries and registered buffers; 0: 64 */
    int n_files;        /* files the slots are spread over; 0: 1 */
    uint64_t cookie;    /* caller's layout id (shape + format); slots written
                           under another cookie are ignored at open */
    bool buffered;      /* true: never try O_DIRECT */
} kv_ssd_config_t;

typedef enum { KV_SSD_READ = 1, KV_SSD_WRITE = 2 } kv_ssd_op_t;

/* One finished request, as kv_ssd_poll returns it. */
typedef struct {
    uint64_t tag; /* as given to kv_ssd_read / kv_ssd_write */
    int op;       /* KV_SSD_READ or KV_SSD_WRITE */
    int slot;
    int status;            /* 0; -EBADMSG (read: checksum failed, the slot was freed);
                              -EIO or another negative errno from the kernel */
    const kv_meta_t *meta; /* read, status 0: the block's meta from the header */
    int fmt;               /* read, status 0: the payload's format */
    const void *data;      /* read, status 0: the payload; valid until the next poll */
    size_t bytes;          /* payload bytes */
} kv_ssd_done_t;

/* What the module knows of a slot that holds a block (see kv_ssd_slot_info). */
typedef struct {
    uint64_t hash;   /* the block's hash */
    uint64_t parent; /* its parent's hash */
    uint64_t seq;    /* write sequence number (larger: newer) */
    int n_tokens;
    int pin;
    int fmt;
    size_t bytes; /* payload bytes */
} kv_ssd_info_t;

/* Open or create the files and rebuild the slot table from their headers
 * (blocks on the disk).  NULL with a one-line reason in err (bad config, no
 * directory, the files locked by another kv_ssd, io_uring unavailable). */
kv_ssd_t *kv_ssd_new(const kv_ssd_config_t *c, char *err, size_t errlen);
/* Submits what is queued and waits for all I/O (pending erases included),
 * syncs and closes the files; nulls *self_p; safe twice. */
void kv_ssd_destroy(kv_ssd_t **self_p);

/* true: O_DIRECT; false: buffered I/O (the filesystem refused O_DIRECT). */
bool kv_ssd_direct(const kv_ssd_t *self);
/* true: registered buffers (READ_FIXED / WRITE_FIXED). */
bool kv_ssd_fixed(const kv_ssd_t *self);
int kv_ssd_capacity(const kv_ssd_t *self);
size_t kv_ssd_slot_bytes(const kv_ssd_t *self);
int kv_ssd_queue_depth(const kv_ssd_t *self);
/* Slots allocated (holding a block or about to). */
int kv_ssd_used(const kv_ssd_t *self);
/* Blocks found at open (after dropping bad and duplicate headers). */
int kv_ssd_recovered(const kv_ssd_t *self);
/* Requests queued or in flight (kv_ssd_poll has work to do). */
int kv_ssd_pending(const kv_ssd_t *self);
/* Requests free for kv_ssd_read / kv_ssd_write right now. */
int kv_ssd_free_requests(const kv_ssd_t *self);

/* A free slot, or -ENOSPC (free a victim first). */
int kv_ssd_alloc(kv_ssd_t *self);
/* Give slot back.  0, or -EINVAL (not allocated).  With I/O in flight on the
 * slot it becomes allocatable when that I/O completes. */
int kv_ssd_free(kv_ssd_t *self, int slot);
/* true and *out filled when slot is allocated and holds a block that was
 * found at open or written successfully. */
bool kv_ssd_slot_info(const kv_ssd_t *self, int slot, kv_ssd_info_t *out);

/* Queue a write of a block into an allocated slot, copying data now.  0;
 * -EINVAL (slot not allocated, bad meta, len > payload_max); -EBUSY (slot has
 * I/O in flight, or no free request: poll first). */
int kv_ssd_write(kv_ssd_t *self, int slot, const kv_meta_t *meta, int fmt, const void *data,
                 size_t len, uint64_t tag);
/* The same without the copy: *payload points into the request's registered
 * buffer, where the caller writes len bytes before the next kv_ssd_poll
 * (which checksums and submits them).  Same returns. */
int kv_ssd_write_prep(kv_ssd_t *self, int slot, const kv_meta_t *meta, int fmt, size_t len,
                      uint64_t tag, void **payload);
/* Queue a read of the block in an allocated slot.  0; -EINVAL (slot not
 * allocated or holds nothing); -EBUSY (no free request: poll first). */
int kv_ssd_read(kv_ssd_t *self, int slot, uint64_t tag);

/* Release the requests returned by the previous poll, submit what is queued,
 * reap completions and return up to max finished requests (the rest wait for
 * the next poll).  wait_us > 0: when nothing has finished yet and I/O is in
 * flight, wait up to that long for a completion.  Returns the number of
 * entries written to out, or a negative errno from the ring. */
int kv_ssd_poll(kv_ssd_t *self, kv_ssd_done_t *out, int max, int wait_us);

#endif
