/* Crash-safe replacement of a user-named output file. Data goes to a temporary file
 * (".NAME.tmp.XXXXXX", created exclusively in the destination's directory), is fsync'd
 * and then renamed over the destination, so the destination is only ever the old file
 * or the complete new one: a kill, a full disk or an I/O error never truncates it, and a
 * process that has the old file mmap'd keeps reading the old inode. On failure only the
 * temporary file is removed; nothing else is ever unlinked. */
#ifndef MI_FILE_H
#define MI_FILE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    FILE *fp;      /* buffered stream on the temporary file; write with fwrite or mi_file_out_write */
    char *path;    /* the destination, symbolic links resolved (the link is kept, its target replaced) */
    char *tmp;     /* the temporary file; NULL once committed or aborted */
} mi_file_out;

/* Start replacing path. Messages do not name path (the caller does, as for gguf_open).
 * Refuses (MI_ERR_INVALID) a destination that exists and is not a
 * regular file (a directory, a device such as /dev/full, a FIFO) and a dangling symbolic
 * link. The new file gets the old one's permission bits, or those of any new file. */
mi_status mi_file_out_open(mi_file_out *o, const char *path);
mi_status mi_file_out_write(mi_file_out *o, const void *p, size_t n);
/* Flush, fsync, rename over the destination, fsync the directory. On failure the
 * temporary file is removed and the destination is left as it was. */
mi_status mi_file_out_commit(mi_file_out *o);
/* Drop the temporary file; the destination is untouched. Safe after commit or twice. */
void mi_file_out_abort(mi_file_out *o);

/* true when a and b name the same file (same device and inode, so through symbolic
 * links, hard links and ".." too); false when either does not exist. */
bool mi_file_same(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif
