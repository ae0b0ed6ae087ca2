/* Probe notes a hostile or careless binary may carry, for tests/safety.rs:
 * names with terminal escape sequences and a newline (to forge a line of
 * output), and two identical notes for one site (a uprobe per address).
 *
 * usage: hostile N    fires each site N times.
 */
#include <stdlib.h>
#include <sys/sdt.h>

#define NOTE(label, provider, name)                                          \
    ".pushsection .note.stapsdt, \"?\", \"note\"\n"                          \
    ".balign 4\n"                                                            \
    ".4byte 992f-991f, 994f-993f, 3\n"                                       \
    "991: .asciz \"stapsdt\"\n"                                              \
    "992: .balign 4\n"                                                       \
    "993: .8byte " label "\n"                                                \
    ".8byte _.stapsdt.base\n"                                                \
    ".8byte 0\n"                                                             \
    ".asciz \"" provider "\"\n"                                              \
    ".asciz \"" name "\"\n"                                                  \
    ".asciz \"-4@%%eax\"\n"                                                  \
    "994: .balign 4\n"                                                       \
    ".popsection\n"

__attribute__((noinline)) static void evil(int i) {
    __asm__ __volatile__(
        "990: .byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        /* ESC ] 0 ; title BEL, ESC [ 2 J, and a newline with a forged line. */
        NOTE("990b", "evil\\033]0;pwned\\007", "clear\\033[2J\\nok:normal 999999")
        :
        : "a"(i)
        : "memory");
}

__attribute__((noinline)) static void dup(int i) {
    __asm__ __volatile__(
        "990: .byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        NOTE("990b", "dup", "tick")
        NOTE("990b", "dup", "tick")
        :
        : "a"(i)
        : "memory");
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    for (int i = 0; i < n; i++) {
        evil(i);
        dup(i);
        STAP_PROBE1(plain, tick, i);
    }
    return 0;
}
