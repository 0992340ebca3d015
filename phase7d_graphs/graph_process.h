/* Phase 7d's process-wide state (graph_process.c), used by graphs7d.c: counters, the
 * capture log, failure injection and the error line of an aborted window. It knows
 * nothing of the wrapped backends. Not for other phases: they use graphs7d.h. */
#ifndef MI_GRAPH_PROCESS_H
#define MI_GRAPH_PROCESS_H
#include "phase7d_graphs/graphs7d.h"
#include <pthread.h>

#define G7_LOG_N 256

/* counters and the capture log (innermost lock) */
extern pthread_mutex_t g7_st_mu;
extern mi_cuda_graph_counters g7_st;
#define STAT_ADD(field, v) do { pthread_mutex_lock(&g7_st_mu); g7_st.field += (v); pthread_mutex_unlock(&g7_st_mu); } while (0)
void g7_log_append(const mi_cuda_graph_capture_rec *r, bool npast_in_key);

bool g7_take_fail(mi_graph_fail mode);
void g7_loud(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void g7_parse_env(void);   /* MINFER_NO_CUDA_GRAPH, MINFER_CUDA_GRAPH_FAIL, MINFER_GRAPH_KEY_EACH_STEP */
bool g7_key_each_step(void);   /* MINFER_GRAPH_KEY_EACH_STEP=1: no split memo (graphs7d.c) */

#endif
