/* Phase 7d's install: the item that switches the staging ring, the ATTN / KV_STORE
 * candidates that read n_past on the device, the environment switches, and the registry's
 * "cuda" becoming the backend below wrapped with capture/replay (graphs7d.c). */
#include "phase7d_graphs/graphs7d.h"
#include "phase7d_graphs/graph_process.h"

/* whatever the phases below registered (7a's constructor, which reads MINFER_CUDA_DEVICE) */
static mi_backend_create_fn g_inner;

static mi_status create_wrapped(mi_backend **out) {
    if (!g_inner) return mi_err(MI_ERR_INTERNAL, "cuda graph: no CUDA backend registered below phase 7d");
    MI_TRY(g_inner(out));
    if (mi_cuda_graph_wrap(*out) != MI_OK) {
        mi_log("cuda graph: %s: this backend runs without graphs", mi_errmsg());
        mi_err_clear();
    }
    return MI_OK;
}

void mi_phase7d_install(void) {
    mi_cuda_item_declare("e6", "pinned staging ring for the inputs of a step");
    g7_add_step_kernels();
    g7_parse_env();
    mi_backend_create_fn inner = mi_backend_registered("cuda");
    if (inner && inner != create_wrapped) g_inner = inner;   /* a second install keeps the first inner */
    mi_backend_register("cuda", create_wrapped);
}
