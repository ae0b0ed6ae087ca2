/* Operands GCC writes only in position-dependent code (gcc -O2 -fno-pie
 * -no-pie): global arrays indexed by a register and addressed absolutely,
 * a symbol plus registers (`longs(,%rax,8)`, `shorts(%rax,%rax)`,
 * `pairs+4(,%rax,8)`). Twelve arguments leave no register free to hold the
 * arrays' addresses.
 *
 * usage: absolute    fires abs:elements once, with 1..9 and the elements at
 *                    index 2 (-30, -3, -3), and exits 0.3 s later (an
 *                    indexed operand's memory is read after the hit, which
 *                    needs the process alive).
 */
#include <sys/sdt.h>
#include <stdint.h>
#include <unistd.h>

int64_t longs[4] = {-10, -20, -30, -40};
static volatile int16_t shorts[4] = {-1, -2, -3, -4};
struct pair {
    int32_t a;
    int8_t b;
};
struct pair pairs[3] = {{1, -1}, {2, -2}, {3, -3}};
volatile int pick = 2;
volatile int64_t v[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

__attribute__((noinline)) void elements(void) {
    int i = pick;
    int64_t a = v[0], b = v[1], c = v[2], d = v[3], e = v[4], f = v[5];
    int64_t g = v[6], h = v[7], k = v[8];
    DTRACE_PROBE12(abs, elements, a, b, c, d, e, f, g, h, k, longs[i], shorts[i], pairs[i].b);
}

int main(void) {
    elements();
    usleep(300000);
    return 0;
}
