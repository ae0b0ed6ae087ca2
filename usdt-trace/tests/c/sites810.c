/* 810 probe sites: 809 sys/sdt.h sites of many:hit and one site, many:odd,
 * whose note has an operand no reader samples (`8f@%xmm0`) between two
 * ordinary ones. The odd operand must not hide the file's other sites.
 *
 * usage: sites810    fires every site once.
 */
#include <sys/sdt.h>

static volatile long counter;

#define HIT STAP_PROBE1(many, hit, counter);
#define HIT10 HIT HIT HIT HIT HIT HIT HIT HIT HIT HIT
#define HIT100 HIT10 HIT10 HIT10 HIT10 HIT10 HIT10 HIT10 HIT10 HIT10 HIT10

__attribute__((noinline)) static void odd(long v, double d) {
    __asm__ __volatile__("990: nop\n"
                         ".pushsection .note.stapsdt, \"?\", \"note\"\n"
                         ".balign 4\n"
                         ".4byte 992f-991f, 994f-993f, 3\n"
                         "991: .asciz \"stapsdt\"\n"
                         "992: .balign 4\n"
                         "993: .8byte 990b\n"
                         ".8byte _.stapsdt.base\n"
                         ".8byte 0\n"
                         ".asciz \"many\"\n"
                         ".asciz \"odd\"\n"
                         ".asciz \"-8@%%rax 8f@%%xmm0 -8@%%rax\"\n"
                         "994: .balign 4\n"
                         ".popsection\n"
                         :
                         : "a"(v), "x"(d)
                         : "memory");
}

int main(void) {
    HIT100 HIT100 HIT100 HIT100 HIT100 HIT100 HIT100 HIT100
    HIT HIT HIT HIT HIT HIT HIT HIT HIT
    odd(810, 0.5);
    return 0;
}
