/* model_chat_template.h - the chat templates strata renders, as table rows: how each is
 * recognised from a GGUF's tokenizer.chat_template text (or, without one, from its
 * vocabulary), and its turn markers, system handling, BOS between turns and generation
 * prompt as data; one renderer runs every row.  Adding a template is a row in
 * model_chat_template.c and its conversations in tests/oracle/test_chat_templates.py,
 * which renders the model's own Jinja text with jinja2 and compares byte for byte.
 */
#ifndef MODEL_CHAT_TEMPLATE_H
#define MODEL_CHAT_TEMPLATE_H

#include "model_tokenizer.h"

#include <stdbool.h>

/* Where a system message goes. */
typedef enum {
    MODEL_CHAT_SYS_TURN = 0, /* a turn of its own, as any role */
    MODEL_CHAT_SYS_JOIN,     /* no system role: every system text (trimmed) is joined and opens
                                the next non-assistant turn's text, when not empty (Gemma, as
                                llama.cpp renders it) */
    MODEL_CHAT_SYS_LAST,     /* no system role: the last system text before a non-assistant
                                turn opens that turn's text (Llama 2) */
} model_chat_sys_t;

/* The text around one message: open (where "%s" stands for the role's name), the content,
 * close. */
typedef struct {
    const char *open;
    const char *close;
} model_chat_turn_t;

/* One chat template: a row of the table. */
typedef struct {
    const char *name;            /* "chatml", "llama3", ... */
    const char *marker;          /* recognised when tokenizer.chat_template contains it */
    const char *vocab_marker[2]; /* or, in a GGUF without that key, when the vocabulary has
                                    both these special tokens (NULL: never) */
    model_chat_turn_t turn;      /* a message of any role */
    model_chat_turn_t assistant; /* an assistant message, when it differs (open NULL: turn) */
    const char *assistant_alias; /* another role name taken as the assistant ("model"), or NULL */
    const char *bos_after_assistant; /* written before a turn that follows an assistant turn
                                        (Llama 2 repeats BOS there), or NULL; the first BOS is
                                        never in the text: encode adds it */
    bool trim;                       /* contents (and folded system text) stripped of surrounding
                                        whitespace */
    model_chat_sys_t system;         /* where a system message goes */
    model_chat_turn_t sys_fold; /* SYS_JOIN / SYS_LAST: the text around the folded system text */
    const char *default_system; /* SYS_TURN: the turn opener whose literal text in the template
                                   is a built-in system prompt, used when the first message is
                                   not a system one ("<|im_start|>system"), or NULL */
    const char *default_system_end; /* where that literal ends ("<|im_end|>") */
    const char *generation;         /* the generation prompt (add_assistant) */
} model_chat_row_t;

/* The rows, ended by a row with name == NULL. */
extern const model_chat_row_t model_chat_rows[];

/* The row whose marker tokenizer.chat_template text tmpl contains (the first in table
 * order), or NULL.  tmpl NULL: the GGUF has no template; then the row whose vocab_marker
 * tokens has_special(ctx, name) says the vocabulary has, or NULL. */
const model_chat_row_t *
model_chat_find(const char *tmpl, bool (*has_special)(void *ctx, const char *name), void *ctx);

/* A template recognised for one model: its row and what it took from the template text. */
typedef struct {
    const model_chat_row_t *row; /* NULL: none recognised */
    char *default_system;        /* the template's built-in system prompt (malloc'd), or NULL */
} model_chat_template_t;

/* Recognise tmpl (as model_chat_find) and take its built-in system prompt.  0, or -ENOMEM
 * (then *self is empty).  A template no row recognises is 0 with row NULL. */
int model_chat_template_init(model_chat_template_t *self, const char *tmpl,
                             bool (*has_special)(void *ctx, const char *name), void *ctx);
void model_chat_template_free(model_chat_template_t *self);

/* Render msgs with the row (model_tokenizer_chat's contract): a malloc'd string, or NULL
 * when no row was recognised or memory ran out. */
char *model_chat_template_render(const model_chat_template_t *self, const model_chat_msg_t *msgs,
                                 int n, bool add_assistant);

#endif
