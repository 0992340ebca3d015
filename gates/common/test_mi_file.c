/* Safe output replacement (common/core/mi_file.h) and the GGUF writer on top of it: a
 * failed write leaves an existing file byte-identical and no temporary file; a commit
 * replaces the file by a new inode (readers of the old one are unaffected); a device
 * node is refused and stays; the same-file test sees through links and "..". */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include "common/core/mi_file.h"
#include "common/gguf/gguf.h"

static char g_dir[64];

static void mk_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/minfer_mifile.XXXXXX");
    cr_assert(mkdtemp(g_dir));
}
static void rm_dir(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_dir);
}
TestSuite(mi_file, .init = mk_dir, .fini = rm_dir);

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}
static bool has(const char *path, const char *text) {
    char b[256] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(b, text, n);
}
static int n_entries(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}
static void path_of(char *p, size_t cap, const char *name) { snprintf(p, cap, "%s/%s", g_dir, name); }

static mi_status failing_fill(void *user, int64_t i, void *dst, size_t n) {
    (void)user; (void)i; (void)dst; (void)n;
    return mi_err(MI_ERR_IO, "simulated failure");
}

Test(mi_file, failed_gguf_write_keeps_existing_file) {
    char p[256];
    path_of(p, sizeof p, "model.gguf");
    put(p, "the old model");
    gguf_writer *w = gguf_writer_new();
    int64_t ne[1] = {64};
    cr_assert_eq(gguf_w_tensor(w, "a", MI_TYPE_F32, 1, ne, NULL), 0);
    cr_expect_neq(gguf_writer_write(w, p, failing_fill, NULL, NULL), MI_OK);
    cr_expect(strstr(mi_errmsg(), "simulated failure"), "%s", mi_errmsg());
    gguf_writer_free(w);
    cr_expect(has(p, "the old model"), "a failed write damaged or removed the existing file");
    cr_expect_eq(n_entries(), 1, "a temporary file was left behind");
}

Test(mi_file, commit_replaces_by_a_new_inode) {
    char p[256];
    path_of(p, sizeof p, "out.bin");
    put(p, "old");
    chmod(p, 0640);
    struct stat a, b;
    cr_assert_eq(stat(p, &a), 0);
    int rd = open(p, O_RDONLY);   /* a reader holding the old file */
    mi_file_out o;
    cr_assert_eq(mi_file_out_open(&o, p), MI_OK, "%s", mi_errmsg());
    cr_expect(strstr(o.tmp, "/.out.bin.tmp.") != NULL, "temporary name %s", o.tmp);
    cr_expect(has(p, "old"), "the destination changed before the commit");
    cr_assert_eq(mi_file_out_write(&o, "new", 3), MI_OK);
    cr_assert_eq(mi_file_out_commit(&o), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(stat(p, &b), 0);
    cr_expect(has(p, "new"));
    cr_expect_neq(a.st_ino, b.st_ino, "replaced in place");
    cr_expect_eq(b.st_mode & 0777, 0640, "permissions not kept: %o", (unsigned)(b.st_mode & 0777));
    char old[8] = {0};
    cr_expect_eq(read(rd, old, sizeof old - 1), 3);
    cr_expect_str_eq(old, "old", "the reader lost the old content");
    close(rd);
    cr_expect_eq(n_entries(), 1);
}

Test(mi_file, abort_leaves_destination) {
    char p[256];
    path_of(p, sizeof p, "out.bin");
    put(p, "old");
    mi_file_out o;
    cr_assert_eq(mi_file_out_open(&o, p), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_file_out_write(&o, "partial", 7), MI_OK);
    mi_file_out_abort(&o);
    mi_file_out_abort(&o);   /* twice is harmless */
    cr_expect(has(p, "old"));
    cr_expect_eq(n_entries(), 1, "temporary file left");
    path_of(p, sizeof p, "new.bin");
    cr_assert_eq(mi_file_out_open(&o, p), MI_OK, "%s", mi_errmsg());
    mi_file_out_abort(&o);
    cr_expect_neq(access(p, F_OK), 0, "an aborted new file exists");
}

Test(mi_file, refuses_non_regular_destinations) {
    struct stat a, b;
    cr_assert_eq(stat("/dev/null", &a), 0);
    mi_file_out o;
    cr_expect_eq(mi_file_out_open(&o, "/dev/null"), MI_ERR_INVALID);
    cr_expect(strstr(mi_errmsg(), "character device"), "%s", mi_errmsg());
    cr_assert_eq(stat("/dev/null", &b), 0);
    cr_expect(S_ISCHR(b.st_mode) && a.st_ino == b.st_ino && a.st_rdev == b.st_rdev, "/dev/null was replaced");
    cr_expect_eq(mi_file_out_open(&o, g_dir), MI_ERR_INVALID, "a directory accepted");
    char p[256], l[256];
    path_of(p, sizeof p, "nowhere");
    path_of(l, sizeof l, "dangling");
    cr_assert_eq(symlink(p, l), 0);
    cr_expect_eq(mi_file_out_open(&o, l), MI_ERR_INVALID, "a dangling link accepted");
    path_of(p, sizeof p, "no/such/dir/out.bin");
    cr_expect_eq(mi_file_out_open(&o, p), MI_ERR_IO);
    cr_expect(strstr(mi_errmsg(), "no/such/dir"), "%s", mi_errmsg());
}

Test(mi_file, symlink_destination_replaces_target) {
    char t[256], l[256];
    path_of(t, sizeof t, "target.bin");
    path_of(l, sizeof l, "link.bin");
    put(t, "old");
    cr_assert_eq(symlink("target.bin", l), 0);
    mi_file_out o;
    cr_assert_eq(mi_file_out_open(&o, l), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_file_out_write(&o, "new", 3), MI_OK);
    cr_assert_eq(mi_file_out_commit(&o), MI_OK, "%s", mi_errmsg());
    struct stat st;
    cr_expect(lstat(l, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
    cr_expect(has(t, "new"));
}

Test(mi_file, same_file) {
    char a[256], b[256], h[256], s[256], up[300];
    path_of(a, sizeof a, "a");
    path_of(b, sizeof b, "b");
    path_of(h, sizeof h, "hard");
    path_of(s, sizeof s, "soft");
    put(a, "x");
    put(b, "x");
    cr_assert_eq(link(a, h), 0);
    cr_assert_eq(symlink("a", s), 0);
    snprintf(up, sizeof up, "%s/../%s/a", g_dir, strrchr(g_dir, '/') + 1);
    cr_expect(mi_file_same(a, a));
    cr_expect(mi_file_same(a, h));
    cr_expect(mi_file_same(s, a));
    cr_expect(mi_file_same(a, up), "%s", up);
    cr_expect(!mi_file_same(a, b));
    path_of(b, sizeof b, "missing");
    cr_expect(!mi_file_same(a, b));
}
