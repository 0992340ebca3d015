/* Backend registry: phases register a constructor by name in their install function;
 * common code creates backends by name. "cpu" is always present. */
#include <stdio.h>
#include "backend.h"
#include <string.h>

#define REG_MAX 8

static struct {
    char name[32];
    mi_backend_create_fn create;
} g_reg[REG_MAX];
static int g_n_reg;

static mi_status cpu_create_default(mi_backend **out) { return mi_backend_cpu_new(0, out); }

void mi_backend_register(const char *name, mi_backend_create_fn create) {
    if (!name || !create) return;
    for (int i = 0; i < g_n_reg; i++)
        if (strcmp(g_reg[i].name, name) == 0) {
            g_reg[i].create = create;   /* re-registration replaces (install is idempotent) */
            return;
        }
    if (g_n_reg == REG_MAX) {
        mi_log("backend registry full: %s not registered", name);
        return;
    }
    snprintf(g_reg[g_n_reg].name, sizeof g_reg[g_n_reg].name, "%s", name);
    g_reg[g_n_reg].create = create;
    g_n_reg++;
}

static mi_backend_create_fn lookup(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < g_n_reg; i++)
        if (strcmp(g_reg[i].name, name) == 0) return g_reg[i].create;
    if (strcmp(name, "cpu") == 0) return cpu_create_default;
    return NULL;
}

mi_status mi_backend_create(const char *name, mi_backend **out) {
    *out = NULL;
    mi_backend_create_fn f = lookup(name);
    if (!f) {
        char list[256] = "cpu";
        size_t used = strlen(list);
        for (int i = 0; i < g_n_reg; i++)
            if (strcmp(g_reg[i].name, "cpu") != 0 && used < sizeof list) {
                int w = snprintf(list + used, sizeof list - used, ", %s", g_reg[i].name);
                if (w > 0) used += (size_t)w;
            }
        return mi_err(MI_ERR_UNSUPPORTED, "backend '%s' is not built in (available: %s)", name ? name : "(null)", list);
    }
    return f(out);
}

bool mi_backend_available(const char *name) { return lookup(name) != NULL; }

mi_backend_create_fn mi_backend_registered(const char *name) { return lookup(name); }
