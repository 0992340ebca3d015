/* Temporary-file-and-rename writer behind mi_file.h. */
#include "mi_file.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* A Ctrl-C during a multi-GB write should not leave the temporary file behind. One
 * output at a time is covered, and only signals nobody else handles. SIGKILL cannot be
 * caught: its stray temporary file is the price of never touching the destination. */
static const int g_sigs[] = {SIGINT, SIGTERM, SIGHUP};
#define N_SIGS (sizeof g_sigs / sizeof g_sigs[0])
static char g_sig_tmp[PATH_MAX];
static volatile sig_atomic_t g_sig_armed;
static bool g_sig_installed[N_SIGS];

static void on_signal(int sig) {
    if (g_sig_armed) unlink(g_sig_tmp);   /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void sig_arm(const char *tmp) {
    if (g_sig_armed || strlen(tmp) >= sizeof g_sig_tmp) return;
    memcpy(g_sig_tmp, tmp, strlen(tmp) + 1);
    g_sig_armed = 1;
    for (size_t i = 0; i < N_SIGS; i++) {
        struct sigaction old, sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        g_sig_installed[i] = false;
        if (sigaction(g_sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
            g_sig_installed[i] = sigaction(g_sigs[i], &sa, NULL) == 0;
    }
}

static void sig_disarm(const char *tmp) {
    if (!g_sig_armed || strcmp(tmp, g_sig_tmp)) return;
    for (size_t i = 0; i < N_SIGS; i++)
        if (g_sig_installed[i]) signal(g_sigs[i], SIG_DFL);
    g_sig_armed = 0;
}

static char *dup_dirname(const char *p) {
    const char *slash = strrchr(p, '/');
    if (!slash) return strdup(".");
    if (slash == p) return strdup("/");
    char *d = malloc((size_t)(slash - p) + 1);
    if (d) {
        memcpy(d, p, (size_t)(slash - p));
        d[slash - p] = 0;
    }
    return d;
}

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* Resolve the destination: symbolic links are followed so that the link survives and
 * its target is replaced; anything but a regular file (or nothing) is refused, since a
 * rename over a device node would replace the node itself. */
static mi_status resolve_dest(const char *path, char **dest, struct stat *st, bool *exists) {
    struct stat lst;
    *exists = false;
    if (!path[0]) return mi_err(MI_ERR_INVALID, "empty output path");
    if (lstat(path, &lst) != 0) {
        if (errno != ENOENT) return mi_err(MI_ERR_IO, "%s", strerror(errno));
        *dest = strdup(path);
        return *dest ? MI_OK : mi_err(MI_ERR_NOMEM, "out of memory");
    }
    if (S_ISLNK(lst.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) {
            if (errno == ENOENT)
                return mi_err(MI_ERR_INVALID, "it is a symbolic link to a file that does not exist; "
                              "remove the link or write to its target");
            return mi_err(MI_ERR_IO, "%s", strerror(errno));
        }
        if (stat(real, st) != 0) {
            mi_status e = mi_err(MI_ERR_IO, "%s: %s", real, strerror(errno));
            free(real);
            return e;
        }
        *dest = real;
    } else {
        *st = lst;
        if (!(*dest = strdup(path))) return mi_err(MI_ERR_NOMEM, "out of memory");
    }
    if (!S_ISREG(st->st_mode)) {
        mi_status e = mi_err(MI_ERR_INVALID, "it is %s, not a regular file; refusing to replace it",
                             kind_of(st->st_mode));
        free(*dest);
        *dest = NULL;
        return e;
    }
    *exists = true;
    return MI_OK;
}

static int open_tmp(const char *dir, const char *base, mode_t mode, char **tmp) {
    static const char az[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    /* a long NAME would push the temporary name past NAME_MAX */
    int blen = (int)strlen(base);
    if (blen > 200) blen = 200;
    size_t cap = strlen(dir) + (size_t)blen + 32;
    char *p = malloc(cap);
    if (!p) { errno = ENOMEM; return -1; }
    for (int attempt = 0; attempt < 100; attempt++) {
        char rnd[7];
        for (int i = 0; i < 6; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            rnd[i] = az[(s >> 33) % (sizeof az - 1)];
        }
        rnd[6] = 0;
        snprintf(p, cap, "%s/.%.*s.tmp.%s", dir, blen, base, rnd);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd >= 0) { *tmp = p; return fd; }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(p);
    errno = e;
    return -1;
}

mi_status mi_file_out_open(mi_file_out *o, const char *path) {
    memset(o, 0, sizeof *o);
    if (!path) return mi_err(MI_ERR_INVALID, "no output path");
    struct stat st;
    bool exists;
    MI_TRY(resolve_dest(path, &o->path, &st, &exists));
    char *dir = dup_dirname(o->path);
    if (!dir) { free(o->path); o->path = NULL; return mi_err(MI_ERR_NOMEM, "out of memory"); }
    const char *slash = strrchr(o->path, '/');
    const char *base = slash ? slash + 1 : o->path;
    int fd = open_tmp(dir, base, 0666, &o->tmp);
    if (fd < 0) {
        mi_status e = mi_err(MI_ERR_IO, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        free(dir);
        free(o->path);
        o->path = NULL;
        return e;
    }
    free(dir);
    /* replacing a file keeps its permissions (a private model stays private) */
    if (exists) (void)fchmod(fd, st.st_mode & 0777);
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
        mi_status e = mi_err(MI_ERR_IO, "%s: %s", o->tmp, strerror(errno));
        close(fd);
        mi_file_out_abort(o);
        return e;
    }
    setvbuf(o->fp, NULL, _IOFBF, 1 << 20);
    sig_arm(o->tmp);
    return MI_OK;
}

mi_status mi_file_out_write(mi_file_out *o, const void *p, size_t n) {
    if (!o->fp) return mi_err(MI_ERR_INVALID, "write to a closed output");
    if (n && fwrite(p, 1, n, o->fp) != n)
        return mi_err(MI_ERR_IO, "write failed: %s", strerror(errno));
    return MI_OK;
}

void mi_file_out_abort(mi_file_out *o) {
    if (o->fp) fclose(o->fp);
    o->fp = NULL;
    if (o->tmp) {
        sig_disarm(o->tmp);   /* first: the handler must never unlink a name we gave up */
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
    }
    free(o->path);
    o->path = NULL;
}

mi_status mi_file_out_commit(mi_file_out *o) {
    if (!o->fp || !o->tmp) return mi_err(MI_ERR_INVALID, "commit of a closed output");
    mi_status st = MI_OK;
    if (fflush(o->fp) != 0 || fsync(fileno(o->fp)) != 0)
        st = mi_err(MI_ERR_IO, "write failed: %s", strerror(errno));
    int rc = fclose(o->fp);
    o->fp = NULL;
    if (st == MI_OK && rc != 0) st = mi_err(MI_ERR_IO, "close failed: %s", strerror(errno));
    if (st != MI_OK) {
        mi_file_out_abort(o);
        return st;
    }
    sig_disarm(o->tmp);   /* after the rename the temporary name may belong to someone else */
    if (rename(o->tmp, o->path) != 0) {
        st = mi_err(MI_ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
        mi_file_out_abort(o);
        return st;
    }
    free(o->tmp);
    o->tmp = NULL;
    /* the rename itself is durable only once the directory is synced */
    char *dir = dup_dirname(o->path);
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL)   /* EINVAL: the file system cannot sync directories */
            st = mi_err(MI_ERR_IO, "the new file is in place but syncing its directory %s failed: %s", dir, strerror(errno));
        close(dfd);
    }
    free(dir);
    free(o->path);
    o->path = NULL;
    return st;
}

bool mi_file_same(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
