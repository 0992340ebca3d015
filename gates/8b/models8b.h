/* gate_8b's model-level cases' shared parts (models8b.c): a case's model opened, the planned
 * prompt tokens, a logits row's top-1 margin. */
#ifndef MI_GATE_MODELS8B_H
#define MI_GATE_MODELS8B_H
#include <stdint.h>
#include "gates/gate_util.h"
#include "common/model/mi.h"

/* a model case selected, its model (the shape and type synthesized for gate 8b next to minfer)
 * found and loaded, the case begun in run; NULL (recorded where it ran into something) otherwise */
mi_model *models8b_open(gu_run *run, const char *minfer, const char *label, const char *shape, const char *type);
/* sequence i's j-th planned token of a vocabulary of V */
int32_t models8b_tok(int i, int64_t j, int64_t V);
/* the top-1 logit less the second (the row's greedy token against any other) */
double models8b_margin(const float *l, int64_t n);

#endif
