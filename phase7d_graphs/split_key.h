/* Phase 7d: a split's scan and key (split_key.c). */
#ifndef MI_SPLIT_KEY_H
#define MI_SPLIT_KEY_H
#include <stdbool.h>
#include "phase7d_graphs/graph_cache.h"
#include "common/backend/backend.h"

typedef struct {
    int first_compute;   /* the split's first node after its head (Inputs, boundary copies) */
    int n_compute;       /* its compute nodes */
    int n_slots;         /* the nodes given step-param slots: slot_node[0 .. n_slots) */
    bool npast_in_key;   /* an ATTN / KV_STORE without a slot: its n_past is in the key */
    g7_hash shape;       /* the key's split identity (eligible splits only) */
} g7_scan;

/* Scan split sp of g: whether it is a decode split eligible for capture (a one-token decode with
 * its n_past in slots, or a step of many sequences whose paged attention is replayable; its head
 * the only place with Inputs and boundary copies; graphs enabled), its slots (at most max_slots,
 * written to slot_node) and its key, which hashes dparams (the device params the slots point
 * into) too. */
bool g7_split_scan(const mi_graph *g, const mi_split *sp, const int32_t *dparams, const mi_tensor **slot_node,
                   int max_slots, g7_scan *out);

#endif
