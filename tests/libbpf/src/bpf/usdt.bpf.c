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
