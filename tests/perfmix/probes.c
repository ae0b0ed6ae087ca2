/* C probes from <sys/sdt.h> (Debian package systemtap-sdt-dev), linked into
 * one binary with the Rust probes of lib.rs, for tests/perf.rs. sys/sdt.h
 * defines its own read-only `.stapsdt.base` and `_.stapsdt.base`; the
 * binary must still give perf the right file offset for every probe. */
#include <stdint.h>
#include <sys/sdt.h>

/* Fires cmix:hit(i, n) for i in 0..n, then cmix:small(-3, -300). */
void perfmix_c(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		STAP_PROBE2(cmix, hit, i, n);
	/* Read through volatile: a constant would be an immediate operand
	 * (`-1@$-3`), which perf skips. */
	volatile int8_t va = -3;
	volatile int16_t vb = -300;
	int8_t a = va;
	int16_t b = vb;
	STAP_PROBE2(cmix, small, a, b);
}
