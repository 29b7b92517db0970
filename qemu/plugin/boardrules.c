/*
 * boardrules: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that judges a guest against
 * two rules the BCM2835 enforces and QEMU's models forgive (issue 27), on every boot of the
 * test command:
 *
 *  spacing  A write to an EMMC (Arasan SDHCI) register other than DATA (+0x20) closer than
 *           two SD clocks after the previous such write, counted in guest instructions at
 *           700 MHz (one instruction per cycle, the ARM1176's best: a program that leaves
 *           this many instructions between the writes leaves at least this much time on the
 *           board). The SD clock is decoded from the CONTROL1 values the guest writes, read
 *           from QEMU's own `sdhci_access` trace (log=FILE: the -D file of `-d
 *           trace:sdhci_access`, which QEMU writes and flushes while the store executes, before
 *           this plugin's after-access callback runs); until a divider is seen, or without
 *           log=, the 400 kHz identification clock is assumed, which is the slowest clock the
 *           guest uses and so the strictest.
 *  barrier  An access to one peripheral's registers after an access to another's without a
 *           data memory barrier executed between them (BCM2835 ARM Peripherals §1.3): the
 *           ARMv6 CP15 DMB (MCR p15, 0, Rt, c7, c10, 5), or the stronger DSB (c7, c10, 4).
 *           A peripheral is a 4 KiB page of the window 0x2000_0000-0x20FF_FFFF, except that the
 *           USB controller's 128 KiB at 0x2098_0000 is one.
 *
 * Arguments: report=FILE (required): each violation is appended at once as a line
 * "violation RULE pc=... addr=... ..." (at most 50 lines; the counts go on), so the report
 * survives a guest killed by SIGKILL; at exit a line "boardrules: spacing=N barrier=M
 * emmc_writes=W switches=S instructions=I" follows. base=HZ: the EMMC base clock the
 * firmware reports (QEMU's mailbox: 50 MHz, the default). log=FILE: see above.
 *
 * The plugin API is declared here, as in bench/plugin/tbcount.c, because Debian ships no
 * qemu-plugin.h; the declarations follow QEMU 7.2's documented API (include/qemu/qemu-plugin.h).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*mem_cb_t)(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr,
                         void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb_t cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                enum qemu_plugin_op op, void *ptr,
                                                uint64_t imm);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, mem_cb_t cb,
                                      enum qemu_plugin_cb_flags flags,
                                      enum qemu_plugin_mem_rw rw, void *userdata);
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);

#define EXPORT __attribute__((visibility("default")))

EXPORT int qemu_plugin_version = 1;

#define PERIPHERAL_BASE 0x20000000u
#define PERIPHERAL_END 0x21000000u
#define USB_BASE 0x20980000u
#define USB_END 0x209A0000u
#define EMMC_BASE 0x20300000u
#define EMMC_END 0x20300100u
#define EMMC_DATA 0x20u
#define EMMC_CONTROL1 0x2Cu
#define CPU_HZ 700000000ull
#define IDENTIFICATION_HZ 400000ull
#define MAX_REPORTED 50

/* Written by inline ops of the one vCPU (raspi machines have one core) and read by the
 * callbacks on the same thread. */
static uint64_t instructions;
static uint64_t barriers;

static uint64_t spacing_violations;
static uint64_t barrier_violations;
static uint64_t emmc_writes;
static uint64_t switches;
static uint64_t reported;

static uint64_t last_peripheral = UINT64_MAX;
static uint64_t barriers_at_last_access;
static bool emmc_written;
static uint64_t last_emmc_write;
static uint64_t sd_clock_hz = IDENTIFICATION_HZ;
static uint64_t base_clock_hz = 50000000;

static int report_fd = -1;
static int log_fd = -1;
static char log_line[512];
static size_t log_used;

static void say(const char *line)
{
    size_t length = strlen(line);
    while (length > 0) {
        ssize_t written = write(report_fd, line, length);
        if (written <= 0) {
            return;
        }
        line += written;
        length -= (size_t)written;
    }
}

static void violation(const char *rule, uint64_t pc, uint64_t address, const char *detail)
{
    if (reported >= MAX_REPORTED) {
        return;
    }
    reported++;
    char line[256];
    snprintf(line, sizeof line, "violation %s pc=0x%08llx addr=0x%08llx %s\n", rule,
             (unsigned long long)pc, (unsigned long long)address, detail);
    say(line);
}

/* The SD clock a CONTROL1 value sets, or 0 if the internal clock is off in it (a reset, or
 * the write that stops the card clock keeps the divider: that one counts too). */
static uint64_t clock_of(uint32_t control1)
{
    if ((control1 & 1u) == 0) {
        return 0;
    }
    uint32_t divider = ((control1 >> 8) & 0xFFu) | (((control1 >> 6) & 0x3u) << 8);
    return divider == 0 ? base_clock_hz : base_clock_hz / (2ull * divider);
}

/* Reads the new lines of QEMU's trace log; for each write of CONTROL1 takes its clock. */
static void read_trace(void)
{
    if (log_fd < 0) {
        return;
    }
    for (;;) {
        ssize_t got = read(log_fd, log_line + log_used, sizeof log_line - 1 - log_used);
        if (got <= 0) {
            return;
        }
        log_used += (size_t)got;
        log_line[log_used] = '\0';
        char *start = log_line;
        char *end;
        while ((end = strchr(start, '\n')) != NULL) {
            *end = '\0';
            /* "sdhci_access wr32: addr[0x002c] <- 0x000e3f05 (...)" */
            const char *at = strstr(start, "sdhci_access wr");
            unsigned long long offset;
            unsigned long long value;
            if (at != NULL) {
                const char *address = strstr(at, "addr[0x");
                if (address != NULL
                    && sscanf(address, "addr[0x%llx] <- 0x%llx", &offset, &value) == 2
                    && offset == EMMC_CONTROL1) {
                    uint64_t hz = clock_of((uint32_t)value);
                    if (hz != 0) {
                        sd_clock_hz = hz;
                    }
                }
            }
            start = end + 1;
        }
        size_t left = log_used - (size_t)(start - log_line);
        if (left == sizeof log_line - 1) {
            left = 0; /* a line longer than the buffer: not one of ours */
        }
        memmove(log_line, start, left);
        log_used = left;
    }
}

static uint64_t peripheral_of(uint64_t address)
{
    if (address >= USB_BASE && address < USB_END) {
        return USB_BASE;
    }
    return address & ~0xFFFull;
}

static void on_memory(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t address,
                      void *userdata)
{
    (void)vcpu;
    if (address < PERIPHERAL_BASE || address >= PERIPHERAL_END) {
        return;
    }
    uint64_t pc = (uint64_t)(uintptr_t)userdata;
    uint64_t peripheral = peripheral_of(address);
    if (last_peripheral != UINT64_MAX && peripheral != last_peripheral) {
        switches++;
        if (barriers == barriers_at_last_access) {
            barrier_violations++;
            char detail[96];
            snprintf(detail, sizeof detail, "from=0x%08llx to=0x%08llx",
                     (unsigned long long)last_peripheral, (unsigned long long)peripheral);
            violation("barrier", pc, address, detail);
        }
    }
    last_peripheral = peripheral;
    barriers_at_last_access = barriers;

    if (address >= EMMC_BASE && address < EMMC_END && (address - EMMC_BASE) != EMMC_DATA
        && qemu_plugin_mem_is_store(info)) {
        emmc_writes++;
        /* The clock that ran since the previous write: decode what came before this one. */
        uint64_t clock = sd_clock_hz;
        uint64_t needed = (2 * CPU_HZ + clock - 1) / clock;
        uint64_t distance = instructions - last_emmc_write;
        if (emmc_written && distance < needed) {
            spacing_violations++;
            char detail[128];
            snprintf(detail, sizeof detail, "offset=0x%02llx after=%llu needed=%llu clock=%llu",
                     (unsigned long long)(address - EMMC_BASE), (unsigned long long)distance,
                     (unsigned long long)needed, (unsigned long long)clock);
            violation("spacing", pc, address, detail);
        }
        emmc_written = true;
        last_emmc_write = instructions;
        /* This write's own value (a new divider) is in the trace by now. */
        read_trace();
    }
}

/* ARMv6 barriers: MCR p15, 0, Rt, c7, c10, {4 DSB, 5 DMB} in any condition, and the ARMv7
 * DMB/DSB encodings (0xF57FF04x/5x) should a guest use them. */
static bool is_barrier(uint32_t word)
{
    uint32_t mcr = word & 0x0FFF0FFFu;
    if (mcr == 0x0E070F9Au || mcr == 0x0E070FBAu) {
        return true;
    }
    return (word & 0xFFFFFFE0u) == 0xF57FF040u;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t count = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < count; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                   &instructions, 1);
        if (qemu_plugin_insn_size(insn) == 4) {
            uint32_t word;
            memcpy(&word, qemu_plugin_insn_data(insn), sizeof word);
            if (is_barrier(word)) {
                qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                           &barriers, 1);
            }
        }
        uintptr_t pc = (uintptr_t)qemu_plugin_insn_vaddr(insn);
        qemu_plugin_register_vcpu_mem_cb(insn, on_memory, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, (void *)pc);
    }
}

static void on_exit_cb(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    char line[256];
    snprintf(line, sizeof line,
             "boardrules: spacing=%llu barrier=%llu emmc_writes=%llu switches=%llu "
             "instructions=%llu\n",
             (unsigned long long)spacing_violations, (unsigned long long)barrier_violations,
             (unsigned long long)emmc_writes, (unsigned long long)switches,
             (unsigned long long)instructions);
    say(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv)
{
    (void)info;
    const char *report = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "report=", 7) == 0) {
            report = argv[i] + 7;
        } else if (strncmp(argv[i], "log=", 4) == 0) {
            /* QEMU creates the -D file only when it first logs: create it here (empty,
             * appending) so that it can be followed from the start. */
            int create = open(argv[i] + 4, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (create >= 0) {
                close(create);
            }
            log_fd = open(argv[i] + 4, O_RDONLY | O_CLOEXEC);
            if (log_fd < 0) {
                fprintf(stderr, "boardrules: cannot read the trace log %s\n", argv[i] + 4);
                return -1;
            }
        } else if (strncmp(argv[i], "base=", 5) == 0) {
            base_clock_hz = strtoull(argv[i] + 5, NULL, 10);
            if (base_clock_hz == 0) {
                fprintf(stderr, "boardrules: base= needs a clock in Hz\n");
                return -1;
            }
        } else {
            fprintf(stderr, "boardrules: unknown argument %s (use report=FILE, log=FILE, "
                            "base=HZ)\n", argv[i]);
            return -1;
        }
    }
    if (report == NULL) {
        fprintf(stderr, "boardrules: needs report=FILE\n");
        return -1;
    }
    report_fd = open(report, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (report_fd < 0) {
        fprintf(stderr, "boardrules: cannot write %s\n", report);
        return -1;
    }
    say("boardrules: started\n");
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
