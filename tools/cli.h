/* Helpers shared by the minfer subcommands (defined in tools/minfer.c). */
#ifndef MI_CLI_H
#define MI_CLI_H
#include <stddef.h>

/* Largest -t the commands accept: 4 x the online CPUs (more only adds switching), at most 1024. */
int mi_cli_max_threads(void);
/* Parses a -t value: 0 means one thread per online CPU; negative, non-numeric or above
 * mi_cli_max_threads() is refused with a message in err. Returns 0 on success. */
int mi_cli_threads(const char *v, int *out, char *err, size_t errsz);
/* "N thread" / "N threads" */
const char *mi_cli_plural(long n, const char *word, char *buf, size_t cap);

#endif
