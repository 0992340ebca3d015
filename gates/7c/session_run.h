/* Session helpers of gate_7c's programs: open a session on a backend, decode a prompt and
 * greedy steps, hash logits, read the device memory in use. */
#ifndef GATE_SESSION_RUN_H
#define GATE_SESSION_RUN_H
#include <stddef.h>
#include <stdint.h>
#include "common/model/mi.h"

int64_t gate_argmax(const float *l, int64_t n);                    /* l [n]: first index of the max */
unsigned long long gate_logits_hash(const float *l, size_t n);      /* FNV-1a over the n floats' bytes */
size_t gate_dev_used(void);                                         /* device 0: total - free bytes; 0 on error */
mi_status gate_open_session(mi_model *m, const char *backend, int64_t n_ctx, int n_threads, mi_session **s);
/* Feed a prompt, then `steps` greedy tokens (each fed back). toks [steps] gets the greedy
 * tokens; last [V] the final logits; either may be NULL. */
mi_status gate_greedy(mi_session *s, const int32_t *prompt, int64_t np, int steps, int32_t *toks, float *last,
                      int64_t V);

#endif
