/* grammar.h - a context-free grammar over bytes (GBNF text form, docs/GRAMMAR.md), the
 * JSON Schema and regex compilers that produce it, and the parse state that follows the
 * bytes (or tokens) a model emits.  Library code with no knowledge of models or actors: the
 * vocabulary comes in as plain arrays (grammar_mask.h).
 *
 * Lifetime: a grammar_t is immutable once built and may be shared by any number of states
 * and threads; a grammar_state_t belongs to one sequence (one thread at a time).
 */
#ifndef GRAMMAR_H
#define GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct grammar_t grammar_t;
typedef struct grammar_state_t grammar_state_t;

/* Parse GBNF text (rules "name ::= ...", the start rule is "root").  NULL on failure, with
 * "line L: what" in err.  Refuses undefined rules, left recursion (also through nullable
 * prefixes) and rules that derive no string. */
grammar_t *grammar_new(const char *gbnf, char *err, size_t errlen);
void grammar_destroy(grammar_t **self_p);

/* Elements of the compiled grammar (positions), for sizing caches and reports. */
int grammar_n_positions(const grammar_t *self);
int grammar_n_rules(const grammar_t *self);

/* JSON Schema (len bytes of JSON text) -> GBNF text, malloc'd (the caller frees it).
 * Fail-closed: a keyword that cannot be enforced is an error; NULL with
 * "PATH: keyword: why" in err (PATH a JSON pointer such as "#/properties/age"). */
char *grammar_schema_to_gbnf(const char *json, size_t len, char *err, size_t errlen);

/* A regular expression (the subset in docs/GRAMMAR.md) -> GBNF text whose root matches the
 * whole expression (implicitly anchored), malloc'd.  NULL with "regex at offset N: what". */
char *grammar_regex_to_gbnf(const char *re, char *err, size_t errlen);

/* ---- parse state: a function of the bytes accepted so far.  Replaying the same bytes
 * (or tokens) from grammar_state_new reaches the same state. */

/* A state at the start of the grammar; g is borrowed and must outlive it.  NULL if out of
 * memory. */
grammar_state_t *grammar_state_new(const grammar_t *g);
/* An independent copy (same bytes accepted, same checkpoints).  NULL if out of memory. */
grammar_state_t *grammar_state_copy(const grammar_state_t *self);
void grammar_state_destroy(grammar_state_t **self_p);

/* Advance over len bytes.  0 if the grammar allows them (a checkpoint is recorded),
 * -EINVAL if it does not (the state is then unchanged), -ENOMEM. */
int grammar_state_accept_bytes(grammar_state_t *self, const void *bytes, size_t len);
/* True when the bytes so far form a complete sentence of the grammar (end allowed). */
bool grammar_state_accepting(const grammar_state_t *self);
/* True when some further byte is allowed. */
bool grammar_state_can_continue(const grammar_state_t *self);

/* Checkpoints: every successful accept_* records one.  grammar_state_checkpoint is their
 * count (0 at the start); grammar_state_rollback(self, n) returns to the state after the
 * first n accepts (O(1): states are persistent), for rejecting speculative draft tokens.
 * -EINVAL if n is more than the count. */
int grammar_state_checkpoint(const grammar_state_t *self);
int grammar_state_rollback(grammar_state_t *self, int n);

#endif
