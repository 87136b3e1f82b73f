/* model_tokenizer.h - text <-> token ids from a GGUF's tokenizer metadata:
 * byte-level BPE (tokenizer.ggml.model = "gpt2", split into words by the pre-tokenizer
 * tokenizer.ggml.pre names: a row of model/model_pretok.c) and SentencePiece-style BPE
 * ("llama": Llama 2, Gemma; spaces as U+2581, a leading one only when
 * tokenizer.ggml.add_space_prefix says so, <0xNN> byte fallback); special/control and
 * user-defined tokens, the ids matching llama.cpp's; BOS/EOS rules from the metadata; the
 * chat template (a row of model/model_chat_template.c); incremental detokenization that
 * never splits a UTF-8 character.
 */
#ifndef MODEL_TOKENIZER_H
#define MODEL_TOKENIZER_H

#include "model_gguf.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct model_tokenizer_t model_tokenizer_t;

/* Build from the GGUF's tokenizer.* keys.  Copies what it needs: the GGUF may be
 * closed afterwards.  NULL on failure with a one-line reason in err. */
model_tokenizer_t *model_tokenizer_new(const model_gguf_t *gguf, char *err, size_t errlen);
void model_tokenizer_destroy(model_tokenizer_t **self_p);

int32_t model_tokenizer_n_vocab(const model_tokenizer_t *self);
int32_t model_tokenizer_bos(const model_tokenizer_t *self); /* -1 if none */
int32_t model_tokenizer_eos(const model_tokenizer_t *self); /* -1 if none */
/* True for tokens that end a generation: EOS, EOT (<|im_end|>, <|eot_id|>, ...). */
bool model_tokenizer_is_eog(const model_tokenizer_t *self, int32_t id);
/* Every end-of-generation id below n_vocab (what --ignore-eos bans), malloc'd
 * (the caller frees it), their count in *n; NULL when out of memory. */
int32_t *model_tokenizer_eog_ids(const model_tokenizer_t *self, int n_vocab, int *n);
/* Whether the metadata asks for BOS at the start of a prompt. */
bool model_tokenizer_add_bos(const model_tokenizer_t *self);

/* Encode len bytes of text.  add_bos: prepend BOS if the model has one.
 * parse_special: text like "<|im_start|>" becomes that special token; otherwise
 * it is ordinary text.  Writes at most max_out ids into out and returns the total
 * number of ids the text needs (call again with a larger buffer if that exceeds
 * max_out), or a negative errno (-EINVAL for invalid UTF-8 is NOT an error: invalid
 * bytes become byte tokens). */
int model_tokenizer_encode(const model_tokenizer_t *self, const char *text, size_t len,
                           bool add_bos, bool parse_special, int32_t *out, int max_out);

/* The bytes token id stands for when detokenized (byte-level decoding applied,
 * SentencePiece's U+2581 turned into a space, <0xNN> byte tokens into the byte).
 * Special/control tokens give their text (e.g. "<|im_end|>") only if
 * render_special, else an empty piece.  *len receives the length; returns a
 * pointer owned by the tokenizer, or NULL for an out-of-range id. */
const char *model_tokenizer_piece(const model_tokenizer_t *self, int32_t id, bool render_special,
                                  size_t *len);

/* Decode ids to a malloc'd NUL-terminated string (special tokens not rendered). */
char *model_tokenizer_decode(const model_tokenizer_t *self, const int32_t *ids, int n);

/* One chat message. */
typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* UTF-8 text */
} model_chat_msg_t;

/* Render messages with the model's chat template: the row of model/model_chat_template.c
 * recognised from the tokenizer.chat_template text (ChatML: SmolLM2, Qwen; Llama 3; Llama 2;
 * Gemma), or, for a GGUF without that key, from its vocabulary (Gemma 3 270M's GGUF has no
 * template key: the special tokens <start_of_turn> and <end_of_turn> say Gemma).  The text
 * never includes the first BOS: encode it with add_bos = model_tokenizer_add_bos().
 * add_assistant: end with the generation prompt (the assistant turn opener).  Returns a
 * malloc'd string, or NULL if the template is not recognised. */
char *model_tokenizer_chat(const model_tokenizer_t *self, const model_chat_msg_t *msgs, int n,
                           bool add_assistant);

/* The name of the chat template row recognised for this model ("chatml", "gemma", ...), or
 * NULL when there is none. */
const char *model_tokenizer_chat_name(const model_tokenizer_t *self);
/* The name of row i of the chat template table (every template strata renders), or NULL
 * past the last row. */
const char *model_tokenizer_chat_row_name(int i);

/* Incremental detokenizer: feed ids one at a time; get back only complete UTF-8
 * characters (a token ending mid-character holds its bytes until the next one). */
typedef struct {
    const model_tokenizer_t *tok; /* borrowed */
    char pending[8];              /* bytes of an unfinished UTF-8 character */
    int n_pending;                /* how many */
} model_detok_t;

void model_detok_init(model_detok_t *d, const model_tokenizer_t *tok);
/* Append the text that token id completes to out (capacity cap, NUL-terminated);
 * returns bytes written (excluding the NUL). cap >= 64 + the longest piece is enough. */
int model_detok_push(model_detok_t *d, int32_t id, char *out, size_t cap);
/* Flush: any incomplete bytes left come out as U+FFFD. */
int model_detok_flush(model_detok_t *d, char *out, size_t cap);

#endif
