/* A probe site written by hand as nop; nop10 (the layout the 7.3 kernel
 * series optimizes), next to an ordinary sys/sdt.h probe that provides
 * `.stapsdt.base`.
 *
 * usage: nop10 N    fires n10:tick and n10:classic N times each.
 */
#include <sys/sdt.h>
#include <stdlib.h>

static void tick(int i) {
    __asm__ __volatile__(
        "990: .byte 0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00\n"
        ".pushsection .note.stapsdt, \"?\", \"note\"\n"
        ".balign 4\n"
        ".4byte 992f-991f, 994f-993f, 3\n"
        "991: .asciz \"stapsdt\"\n"
        "992: .balign 4\n"
        "993: .8byte 990b\n"
        ".8byte _.stapsdt.base\n"
        ".8byte 0\n"
        ".asciz \"n10\"\n"
        ".asciz \"tick\"\n"
        ".asciz \"-4@%%eax\"\n"
        "994: .balign 4\n"
        ".popsection\n"
        :
        : "a"(i)
        : "memory");
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    for (int i = 0; i < n; i++) {
        tick(i);
        STAP_PROBE1(n10, classic, i);
    }
    return 0;
}
