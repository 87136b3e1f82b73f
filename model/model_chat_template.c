/* model_chat_template.c - the chat template table (one row per template: how it is
 * recognised, its markers and system handling as data) and the one renderer every row
 * runs through (model_chat_template.h).  Each row is checked byte for byte against its
 * model's own Jinja template by tests/oracle/test_chat_templates.py.
 */
#include "model_chat_template.h"

#include "base_buf.h"
#include "base_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TAG "tokenizer"

/* In recognition order: Gemma's template also holds no other row's marker, ChatML's may
 * quote Llama 3's in a comment, so the order is the old if-chain's. */
const model_chat_row_t model_chat_rows[] = {
    {
        /* Gemma 2/3: "<start_of_turn>user\n...<end_of_turn>\n", the assistant called "model";
         * no system role: its text opens the first user turn, a blank line after it */
        .name = "gemma",
        .marker = "<start_of_turn>",
        .vocab_marker = {"<start_of_turn>", "<end_of_turn>"}, /* Gemma 3 270M: no template */
        .turn = {"<start_of_turn>%s\n", "<end_of_turn>\n"},
        .assistant = {"<start_of_turn>model\n", "<end_of_turn>\n"},
        .assistant_alias = "model",
        .trim = true,
        .system = MODEL_CHAT_SYS_JOIN,
        .sys_fold = {"", "\n\n"},
        .generation = "<start_of_turn>model\n",
    },
    {
        /* ChatML (SmolLM2, Qwen2/2.5/3): "<|im_start|>role\n...<|im_end|>\n", contents as they
         * are; a system prompt of the template's own when the first message is not one */
        .name = "chatml",
        .marker = "<|im_start|>",
        .turn = {"<|im_start|>%s\n", "<|im_end|>\n"},
        .system = MODEL_CHAT_SYS_TURN,
        .default_system = "<|im_start|>system",
        .default_system_end = "<|im_end|>",
        .generation = "<|im_start|>assistant\n",
    },
    {
        /* Llama 3: "<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>", trimmed */
        .name = "llama3",
        .marker = "<|start_header_id|>",
        .turn = {"<|start_header_id|>%s<|end_header_id|>\n\n", "<|eot_id|>"},
        .trim = true,
        .system = MODEL_CHAT_SYS_TURN,
        .generation = "<|start_header_id|>assistant<|end_header_id|>\n\n",
    },
    {
        /* Llama 2: "[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...";
         * the answer simply follows "[/INST]": no generation prompt */
        .name = "llama2",
        .marker = "[INST]",
        .turn = {"[INST] ", " [/INST]"},
        .assistant = {" ", " </s>"},
        .bos_after_assistant = "<s>",
        .trim = true,
        .system = MODEL_CHAT_SYS_LAST,
        .sys_fold = {"<<SYS>>\n", "\n<</SYS>>\n\n"},
        .generation = "",
    },
    {.name = NULL},
};

const model_chat_row_t *
model_chat_find(const char *tmpl, bool (*has_special)(void *ctx, const char *name), void *ctx) {
    for (const model_chat_row_t *r = model_chat_rows; r->name; r++) {
        if (tmpl ? strstr(tmpl, r->marker) != NULL
                 : r->vocab_marker[0] && has_special && has_special(ctx, r->vocab_marker[0]) &&
                       has_special(ctx, r->vocab_marker[1]))
            return r;
    }
    return NULL;
}

/* The template's built-in system prompt: the literal text (no Jinja expression, no end of a
 * string) between open (followed by a newline, real or written "\n") and end inside the
 * template, with "\n" escapes turned into newlines; NULL when there is none.  *oom is set
 * when memory ran out. */
static char *s_default_system(const char *tmpl, const char *open, const char *end, bool *oom) {
    const char *p = strstr(tmpl, open);
    while (p) {
        const char *q = p + strlen(open);
        if (*q == '\n')
            q++;
        else if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else {
            p = strstr(q, open);
            continue;
        }
        const char *e = strstr(q, end);
        if (!e)
            return NULL;
        size_t n = (size_t)(e - q);
        bool literal = n > 0;
        for (size_t i = 0; i < n && literal; i++)
            if (q[i] == '{' || q[i] == '}' || q[i] == '\'' || q[i] == '"')
                literal = false;
        if (literal) {
            char *s = malloc(n + 1);
            if (!s) {
                *oom = true;
                return NULL;
            }
            size_t o = 0;
            for (size_t i = 0; i < n; i++) {
                if (q[i] == '\\' && i + 1 < n && q[i + 1] == 'n') {
                    s[o++] = '\n';
                    i++;
                } else {
                    s[o++] = q[i];
                }
            }
            s[o] = '\0';
            return s;
        }
        p = strstr(e, open);
    }
    return NULL;
}

int model_chat_template_init(model_chat_template_t *self, const char *tmpl,
                             bool (*has_special)(void *ctx, const char *name), void *ctx) {
    memset(self, 0, sizeof *self);
    self->row = model_chat_find(tmpl, has_special, ctx);
    if (!self->row) {
        if (tmpl)
            LOG_W(TAG, "chat template not recognised (not ChatML, Llama 3, Llama 2 or Gemma)");
        return 0;
    }
    bool oom = false;
    if (tmpl && self->row->default_system)
        self->default_system =
            s_default_system(tmpl, self->row->default_system, self->row->default_system_end, &oom);
    return oom ? -ENOMEM : 0;
}

void model_chat_template_free(model_chat_template_t *self) {
    free(self->default_system);
    memset(self, 0, sizeof *self);
}

/* Appends that remember a failure: *rc becomes -ENOMEM and stays so. */
static void s_put(base_buf_t *b, int *rc, const char *s, size_t n) {
    if (!*rc)
        *rc = base_buf_add(b, s, n);
}

static void s_puts(base_buf_t *b, int *rc, const char *s) {
    if (s)
        s_put(b, rc, s, strlen(s));
}

/* s, without leading and trailing whitespace when trim (Jinja's trim / Python's strip, ASCII). */
static void s_put_text(base_buf_t *b, int *rc, const char *s, bool trim) {
    if (!s)
        return;
    size_t n = strlen(s), i = 0;
    if (trim) {
        while (i < n && strchr(" \t\n\r\v\f", s[i]))
            i++;
        while (n > i && strchr(" \t\n\r\v\f", s[n - 1]))
            n--;
    }
    s_put(b, rc, s + i, n - i);
}

/* A turn opener: open with its "%s" replaced by role. */
static void s_put_open(base_buf_t *b, int *rc, const char *open, const char *role) {
    const char *r = strstr(open, "%s");
    if (!r) {
        s_puts(b, rc, open);
        return;
    }
    s_put(b, rc, open, (size_t)(r - open));
    s_puts(b, rc, role);
    s_puts(b, rc, r + 2);
}

char *model_chat_template_render(const model_chat_template_t *self, const model_chat_msg_t *msgs,
                                 int n, bool add_assistant) {
    const model_chat_row_t *row = self ? self->row : NULL;
    if (!row || n < 0 || (n > 0 && !msgs))
        return NULL;
    base_buf_t b = {0}, sys = {0}; /* the text; the system text waiting to be folded */
    int rc = base_buf_add(&b, "", 0);
    bool sys_pending = false, after_assistant = false;
    if (n > 0 && self->default_system && (!msgs[0].role || strcmp(msgs[0].role, "system"))) {
        s_put_open(&b, &rc, row->turn.open, "system");
        s_puts(&b, &rc, self->default_system);
        s_puts(&b, &rc, row->turn.close);
    }
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role ? msgs[i].role : "";
        if (row->system != MODEL_CHAT_SYS_TURN && !strcmp(role, "system")) {
            if (row->system == MODEL_CHAT_SYS_LAST)
                base_buf_reset(&sys);
            s_put_text(&sys, &rc, msgs[i].content, row->trim);
            sys_pending =
                row->system == MODEL_CHAT_SYS_LAST ? msgs[i].content != NULL : sys.len > 0;
            continue;
        }
        bool assistant = !strcmp(role, "assistant") ||
                         (row->assistant_alias && !strcmp(role, row->assistant_alias));
        const model_chat_turn_t *t =
            assistant && row->assistant.open ? &row->assistant : &row->turn;
        if (after_assistant && !assistant)
            s_puts(&b, &rc, row->bos_after_assistant);
        s_put_open(&b, &rc, t->open, role);
        if (sys_pending && !assistant) {
            s_puts(&b, &rc, row->sys_fold.open);
            if (sys.len)
                s_put(&b, &rc, sys.p, sys.len);
            s_puts(&b, &rc, row->sys_fold.close);
            base_buf_reset(&sys);
            sys_pending = false;
        }
        s_put_text(&b, &rc, msgs[i].content, row->trim);
        s_puts(&b, &rc, t->close);
        after_assistant = assistant;
    }
    if (add_assistant)
        s_puts(&b, &rc, row->generation);
    base_buf_free(&sys);
    if (rc) {
        base_buf_free(&b);
        return NULL;
    }
    return base_buf_take(&b);
}
