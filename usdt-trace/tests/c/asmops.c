/* Probe sites whose notes are written by hand, with the operand forms
 * hand-written assembly and other headers use: SIB addressing, sums as
 * displacements, operands without SIZE@ (8 bytes), a symbol plus an offset
 * relative to %rip, an xmm register, a nop5-only site (the kernel's BPF
 * selftests), and one note malformed as a whole (an empty provider), which
 * a reader skips while reading the others. An ordinary sys/sdt.h probe
 * provides `.stapsdt.base`.
 *
 * usage: asmops    fires each asm:* probe once, with the values below, and
 *                  exits 0.3 s later (the memory of an indexed operand is
 *                  read after the hit, which needs the process alive).
 */
#include <sys/sdt.h>
#include <stdint.h>
#include <unistd.h>

int64_t asm_table[4] = {100, -200, 300, -400};
int32_t asm_words[4] = {11, -22, 33, 44};

/* One note: Location at label 990, then provider, name and arguments. */
#define NOTE(provider, name, args)                                  \
    ".pushsection .note.stapsdt, \"?\", \"note\"\n"                 \
    ".balign 4\n"                                                   \
    ".4byte 992f-991f, 994f-993f, 3\n"                              \
    "991: .asciz \"stapsdt\"\n"                                     \
    "992: .balign 4\n"                                              \
    "993: .8byte 990b\n"                                            \
    ".8byte _.stapsdt.base\n"                                       \
    ".8byte 0\n"                                                    \
    ".asciz \"" provider "\"\n"                                     \
    ".asciz \"" name "\"\n"                                         \
    ".asciz \"" args "\"\n"                                         \
    "994: .balign 4\n"                                              \
    ".popsection\n"

#define NOP_NOP5 "990: .byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00\n"

__attribute__((noinline)) void sib(int64_t *table, int64_t i) {
    __asm__ __volatile__(NOP_NOP5 NOTE("asm", "sib",
                                       "-8@(%%rdx,%%rax,8) -8@8(%%rdx,%%rax,8) "
                                       "-8@-8(%%rdx,%%rax,8) -4@(%%rcx,%%rax,2)")
                         :
                         : "d"(table), "a"(i), "c"(asm_words)
                         : "memory");
}

__attribute__((noinline)) void expr(int64_t *table) {
    __asm__ __volatile__(NOP_NOP5 NOTE("asm", "expr", "-8@-8+16(%%rdx) -8@0x10+8(%%rdx) -8@8-8(%%rdx)")
                         :
                         : "d"(table)
                         : "memory");
}

__attribute__((noinline)) void bare(int64_t v, int64_t *table) {
    __asm__ __volatile__(NOP_NOP5 NOTE("asm", "bare", "%%rcx 16(%%rdx) $-9")
                         :
                         : "c"(v), "d"(table)
                         : "memory");
}

__attribute__((noinline)) void symbols(void) {
    __asm__ __volatile__(NOP_NOP5 NOTE("asm", "symbols",
                                       "-8@asm_table(%%rip) -8@asm_table+8(%%rip) "
                                       "-4@4+asm_words(%%rip) -4@asm_words+8(%%rip) -8@asm_table")
                         :
                         :
                         : "memory");
}

__attribute__((noinline)) void xmm(int64_t v, double d) {
    __asm__ __volatile__(NOP_NOP5 NOTE("asm", "xmm", "-8@%%rax 8f@%%xmm0 -8@%%rax")
                         :
                         : "a"(v), "x"(d)
                         : "memory");
}

__attribute__((noinline)) void nop5(int64_t v) {
    __asm__ __volatile__("990: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" NOTE("asm", "nop5", "-8@%%rax")
                         :
                         : "a"(v)
                         : "memory");
}

__attribute__((noinline)) void malformed(void) {
    __asm__ __volatile__(NOP_NOP5 NOTE("", "noprovider", "8@%%rax") ::: "memory");
}

int main(void) {
    sib(asm_table, 2);
    expr(asm_table);
    bare(-123456789, asm_table);
    symbols();
    xmm(-42, 6.5);
    nop5(-7);
    malformed();
    STAP_PROBE(asm, classic);
    usleep(300000);
    return 0;
}
