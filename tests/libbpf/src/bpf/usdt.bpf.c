// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// One program for every probe of the `types` example: it reads each argument
// with libbpf's bpf_usdt_arg() (libbpf parsed the note's operands in user
// space) and, for the arguments the cookie marks as strings, the bytes they
// point to, and sends it all to user space through a ring buffer.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/usdt.bpf.h>

#define MAX_ARGS 12
#define MAX_STRS 4
#define STR_LEN 256

struct event {
	__u64 cookie;
	__s32 arg_cnt;
	__u32 pid;
	/* Bit i set: bpf_usdt_arg() failed for argument i. */
	__u32 arg_errors;
	__u32 pad;
	__u64 args[MAX_ARGS];
	char strs[MAX_STRS][STR_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* The cookie: probe index in the low 32 bits, a mask of the arguments (among
 * the first MAX_STRS) that are strings in the high 32 bits. */
SEC("usdt")
int on_probe(struct pt_regs *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u64 cookie = bpf_usdt_cookie(ctx);
	int i;

	if (!e)
		return 0;
	e->cookie = cookie;
	e->arg_cnt = bpf_usdt_arg_cnt(ctx);
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->arg_errors = 0;
	e->pad = 0;
	for (i = 0; i < MAX_ARGS; i++) {
		long v = 0;

		if (i < e->arg_cnt && bpf_usdt_arg(ctx, i, &v))
			e->arg_errors |= 1u << i;
		e->args[i] = v;
	}
	for (i = 0; i < MAX_STRS; i++) {
		e->strs[i][0] = 0;
		if ((cookie >> 32) & (1u << i))
			bpf_probe_read_user_str(e->strs[i], STR_LEN, (const void *)e->args[i]);
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Counters for the load and fork checks, read by user space: hits per
 * thread (load) or per `who` (fork) in 0..8, then the violations, then the
 * last iteration + 1 seen per thread in 16..24. */
#define BAD_CHECK 8
#define BAD_ORDER 9
#define BAD_THREAD 10
#define ARG_ERRORS 11
#define LAST 16

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void add(__u32 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		__sync_fetch_and_add(v, n);
}

/* Counts a hit of thread `t` at iteration `i`, whose third argument should
 * be `want`; each thread's iterations must strictly increase. */
static __always_inline int tally(__u64 t, __u64 i, __u64 c, __u64 want)
{
	__u32 key;
	__u64 *last;

	if (t >= 8) {
		add(BAD_THREAD, 1);
		return 0;
	}
	if (c != want)
		add(BAD_CHECK, 1);
	key = LAST + t;
	last = bpf_map_lookup_elem(&stats, &key);
	if (last) {
		if (i + 1 <= *last)
			add(BAD_ORDER, 1);
		*last = i + 1;
	}
	add(t, 1);
	return 0;
}

/* load:tick(thread, iteration, checksum(thread, iteration)), see
 * examples/load.rs. */
SEC("usdt")
int on_load_tick(struct pt_regs *ctx)
{
	long t, i, c;
	__u64 want;

	if (bpf_usdt_arg(ctx, 0, &t) || bpf_usdt_arg(ctx, 1, &i) || bpf_usdt_arg(ctx, 2, &c)) {
		add(ARG_ERRORS, 1);
		return 0;
	}
	want = (((__u64)t << 56) ^ (__u64)i) * 0x9e3779b97f4a7c15ULL;
	want = (want << 29) | (want >> 35);
	return tally(t, i, c, want);
}

/* fork:tick(who, i, who << 32 | i), see examples/fork.rs. */
SEC("usdt")
int on_fork_tick(struct pt_regs *ctx)
{
	long w, i, c;

	if (bpf_usdt_arg(ctx, 0, &w) || bpf_usdt_arg(ctx, 1, &i) || bpf_usdt_arg(ctx, 2, &c)) {
		add(ARG_ERRORS, 1);
		return 0;
	}
	return tally(w, i, c, ((__u64)w << 32) | (__u64)i);
}
