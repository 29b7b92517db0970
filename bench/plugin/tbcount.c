/*
 * tbcount: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that counts the guest
 * instructions executed in every translation block, for `bramble-bench --profile`.
 *
 * Each translated block gets a record (its guest address, its instruction count and a
 * 64-bit counter) and an inline "add n_insns" op on that counter, so executing a block costs
 * one add and no call. A thread of the plugin reads lines from the control FIFO `ctl=PATH`;
 * for each line NAME it writes every record with a nonzero counter to `out=DIR`/NAME.txt
 * (through a temporary file renamed into place, so a reader never sees half a snapshot):
 * one "ADDRESS INSNS EXECUTED" line per record, hexadecimal address, decimal counts, and a
 * last line "end". At exit the same goes to DIR/exit.txt. The benchmark subtracts two
 * snapshots and attributes the blocks to the kernel's functions (bench/src/profile.rs).
 *
 * The API is declared here (the few stable functions used) because Debian ships no
 * qemu-plugin.h; the declarations follow QEMU 7.2's documented plugin API.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb,
                                              enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb_t cb, void *userdata);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);

#define EXPORT __attribute__((visibility("default")))

EXPORT int qemu_plugin_version = 1;

/* One translated block. `executed` is only written by the vCPU's inline op. */
struct block {
    uint64_t executed;
    uint64_t address;
    uint64_t insns;
};

#define CHUNK_BLOCKS 4096
#define MAX_CHUNKS 8192

/* Blocks live in chunks that are never freed or moved; `published` counts the blocks whose
 * address and size are written (stored with release, loaded with acquire). */
static struct block *chunks[MAX_CHUNKS];
static size_t published;
static size_t dropped;
static char *out_dir;
static char *ctl_path;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t index = __atomic_load_n(&published, __ATOMIC_RELAXED);
    size_t chunk = index / CHUNK_BLOCKS;
    if (chunk >= MAX_CHUNKS) {
        dropped++;
        return;
    }
    if (chunks[chunk] == NULL) {
        struct block *fresh = calloc(CHUNK_BLOCKS, sizeof(struct block));
        if (fresh == NULL) {
            dropped++;
            return;
        }
        __atomic_store_n(&chunks[chunk], fresh, __ATOMIC_RELEASE);
    }
    struct block *block = &chunks[chunk][index % CHUNK_BLOCKS];
    block->address = qemu_plugin_tb_vaddr(tb);
    block->insns = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                             &block->executed, block->insns);
    __atomic_store_n(&published, index + 1, __ATOMIC_RELEASE);
}

/* Writes the snapshot `name` (letters, digits, '-' and '_' only) into out_dir. */
static void snapshot(const char *name)
{
    size_t length = strlen(out_dir) + strlen(name) + 16;
    char *final_path = malloc(length);
    char *temporary = malloc(length);
    if (final_path == NULL || temporary == NULL) {
        free(final_path);
        free(temporary);
        return;
    }
    snprintf(final_path, length, "%s/%s.txt", out_dir, name);
    snprintf(temporary, length, "%s/%s.tmp", out_dir, name);
    FILE *file = fopen(temporary, "w");
    if (file != NULL) {
        size_t count = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
        for (size_t index = 0; index < count; index++) {
            struct block *chunk = __atomic_load_n(&chunks[index / CHUNK_BLOCKS], __ATOMIC_ACQUIRE);
            struct block *block = &chunk[index % CHUNK_BLOCKS];
            uint64_t executed = __atomic_load_n(&block->executed, __ATOMIC_RELAXED);
            if (executed != 0) {
                fprintf(file, "%llx %llu %llu\n", (unsigned long long)block->address,
                        (unsigned long long)block->insns, (unsigned long long)executed);
            }
        }
        fprintf(file, "end %zu blocks %zu dropped\n", count, dropped);
        if (fclose(file) == 0) {
            rename(temporary, final_path);
        }
    }
    free(final_path);
    free(temporary);
}

static int valid_name(const char *name)
{
    if (*name == '\0') {
        return 0;
    }
    for (const char *c = name; *c != '\0'; c++) {
        if (!(( *c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
              || *c == '-' || *c == '_')) {
            return 0;
        }
    }
    return 1;
}

/* Reads snapshot names from the control FIFO, one per line, for the life of QEMU. */
static void *control(void *unused)
{
    (void)unused;
    char line[128];
    for (;;) {
        FILE *fifo = fopen(ctl_path, "r");
        if (fifo == NULL) {
            if (errno == EINTR) {
                continue;
            }
            return NULL;
        }
        while (fgets(line, sizeof line, fifo) != NULL) {
            line[strcspn(line, "\r\n")] = '\0';
            if (valid_name(line)) {
                snapshot(line);
            }
        }
        fclose(fifo);
    }
    return NULL;
}

static void on_exit_cb(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    snapshot("exit");
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_dir = strdup(argv[i] + 4);
        } else if (strncmp(argv[i], "ctl=", 4) == 0) {
            ctl_path = strdup(argv[i] + 4);
        } else {
            fprintf(stderr, "tbcount: unknown argument %s (use out=DIR, ctl=FIFO)\n", argv[i]);
            return -1;
        }
    }
    if (out_dir == NULL) {
        fprintf(stderr, "tbcount: needs out=DIR\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    if (ctl_path != NULL) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, control, NULL) != 0) {
            fprintf(stderr, "tbcount: cannot start the control thread\n");
            return -1;
        }
        pthread_detach(thread);
    }
    return 0;
}
