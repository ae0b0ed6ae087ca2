/* Probe arguments in the operand forms compilers write through sys/sdt.h:
 * registers, stack slots, floats (`4f@`, `8f@`), globals (`sym(%rip)`),
 * constants in .rodata (`.LC0(%rip)`, `.LCPI0_0(%rip)`), an indexed array
 * element (`(%rdi,%rsi,8)`) and, with -DWIDE, 16 and 24-byte values
 * (`__int128` and structs by value).
 *
 * usage: operands    fires each ops:* probe once, with the values below,
 *                    and exits 0.3 s later (an indexed operand's memory is
 *                    read after the hit, which needs the process alive).
 */
#include <sys/sdt.h>
#include <stdint.h>
#include <unistd.h>

struct s16 { int64_t a, b; };
struct s24 { int64_t a, b, c; };

volatile int64_t g_long = -1234567;
static volatile int32_t s_int = 77;
int64_t arr[8] = {10, 11, 12, 13, 14, 15, 16, 17};
volatile int idx = 3;

__attribute__((noinline)) void scalars(int8_t a, int16_t b, int32_t c, int64_t d, uint64_t e) {
    DTRACE_PROBE5(ops, scalars, a, b, c, d, e);
}

__attribute__((noinline)) void floats(float f, double d) {
    DTRACE_PROBE2(ops, floats, f, d);
}

__attribute__((noinline)) void constfloat(void) {
    double d = 2.5;
    float f = 0.75f;
    DTRACE_PROBE2(ops, constfloat, d, f);
}

__attribute__((noinline)) void globals(void) {
    DTRACE_PROBE2(ops, globals, g_long, s_int);
}

__attribute__((noinline)) void indexed(int64_t *p, int i) {
    DTRACE_PROBE1(ops, indexed, p[i]);
}

#ifdef WIDE
__attribute__((noinline)) void wide(__int128 x, struct s16 a, struct s24 b) {
    DTRACE_PROBE3(ops, wide, x, a, b);
}
#endif

__attribute__((noinline)) void none(void) {
    DTRACE_PROBE(ops, none);
}

int main(void) {
    scalars(-5, -300, -70000, -5000000000LL, 18446744073709551615ULL);
    floats(1.5f, -3.25);
    constfloat();
    globals();
    indexed(arr, idx);
#ifdef WIDE
    __int128 x = ((__int128)0x0102030405060708LL << 64) | 0x1112131415161718ULL;
    struct s16 a = {1, 2};
    struct s24 b = {3, 4, 5};
    wide(x, a, b);
#endif
    none();
    usleep(300000);
    return 0;
}
