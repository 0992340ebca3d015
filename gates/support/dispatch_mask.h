/* Gates that need "a build whose CUDA matmul lacks a type": the MATMUL candidates are
 * replaced by one that refuses that weight type and otherwise runs what the dispatch
 * would have chosen, so supports() (and the model's eligibility) read the narrower build. */
#ifndef GATE_DISPATCH_MASK_H
#define GATE_DISPATCH_MASK_H
#include "common/quant/mi_types.h"

void gate_matmul_refuse(mi_type t);   /* until gate_matmul_restore */
void gate_matmul_restore(void);

#endif
