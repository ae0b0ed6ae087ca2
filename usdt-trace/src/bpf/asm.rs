//! A tiny encoder for the BPF instructions the counting program uses
//! (`struct bpf_insn` and the opcode bits of the kernel's
//! `include/uapi/linux/bpf_common.h` and `bpf.h`).

/// One instruction: opcode, destination and source registers, offset and
/// immediate, as `struct bpf_insn` lays them out.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    /// Destination register in the low 4 bits, source in the high 4.
    regs: u8,
    off: i16,
    imm: i32,
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

/// A register, `r0` to `r10`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reg(u8);

/// The return value, and a helper's result.
pub(crate) const R0: Reg = Reg(0);
/// The first argument (on entry: the program's context).
pub(crate) const R1: Reg = Reg(1);
/// The second argument.
pub(crate) const R2: Reg = Reg(2);
/// The read-only frame pointer (the stack grows down from it).
pub(crate) const R10: Reg = Reg(10);

// Instruction classes.
const BPF_LD: u8 = 0x00;
const BPF_STX: u8 = 0x03;
const BPF_JMP: u8 = 0x05;
const BPF_ALU64: u8 = 0x07;
// Sizes: 4 and 8 bytes.
const BPF_W: u8 = 0x00;
const BPF_DW: u8 = 0x18;
// Modes.
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_ATOMIC: u8 = 0xc0;
// Operand source: the immediate or a register.
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
// ALU and jump operations.
const BPF_ADD: u8 = 0x00;
const BPF_MOV: u8 = 0xb0;
const BPF_JEQ: u8 = 0x10;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
/// `src_reg` of a 64-bit immediate load whose immediate is a map's fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst.0 | (src.0 << 4),
        off,
        imm,
    }
}

/// `dst = imm` (64-bit).
pub(crate) fn mov64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, R0, 0, imm)
}

/// `dst = src` (64-bit).
pub(crate) fn mov64_reg(dst: Reg, src: Reg) -> Insn {
    insn(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
}

/// `dst += imm` (64-bit).
pub(crate) fn add64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_ADD | BPF_K, dst, R0, 0, imm)
}

/// `*(u32 *)(dst + off) = src`.
pub(crate) fn store32(dst: Reg, off: i16, src: Reg) -> Insn {
    insn(BPF_STX | BPF_MEM | BPF_W, dst, src, off, 0)
}

/// `lock *(u64 *)(dst + off) += src`: atomic, so that a task preempted on
/// the same CPU between a load and a store cannot lose a count.
pub(crate) fn atomic_add64(dst: Reg, off: i16, src: Reg) -> Insn {
    insn(
        BPF_STX | BPF_ATOMIC | BPF_DW,
        dst,
        src,
        off,
        i32::from(BPF_ADD),
    )
}

/// `dst = map` (the map's address, which the kernel puts in place of its
/// descriptor): two instructions.
pub(crate) fn load_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
    [
        insn(
            BPF_LD | BPF_IMM | BPF_DW,
            dst,
            Reg(BPF_PSEUDO_MAP_FD),
            0,
            fd,
        ),
        insn(0, R0, R0, 0, 0),
    ]
}

/// `if dst == imm goto pc + 1 + off`.
pub(crate) fn jeq_imm(dst: Reg, imm: i32, off: i16) -> Insn {
    insn(BPF_JMP | BPF_JEQ | BPF_K, dst, R0, off, imm)
}

/// `r0 = helper(r1, ..., r5)`.
pub(crate) fn call(helper: i32) -> Insn {
    insn(BPF_JMP | BPF_CALL, R0, R0, 0, helper)
}

/// `return r0`.
pub(crate) fn exit() -> Insn {
    insn(BPF_JMP | BPF_EXIT, R0, R0, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instruction as the kernel reads it from memory.
    fn bytes(i: Insn) -> [u8; 8] {
        let mut b = [i.code, i.regs, 0, 0, 0, 0, 0, 0];
        b[2..4].copy_from_slice(&i.off.to_le_bytes());
        b[4..].copy_from_slice(&i.imm.to_le_bytes());
        b
    }

    /// Encodings as `llvm-objdump -d` prints them for clang's BPF target
    /// (a map load differs only in its source register, 1: "the immediate
    /// is a map's descriptor").
    #[test]
    fn encodings_match_llvm() {
        assert_eq!(bytes(mov64_imm(R0, 0)), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(mov64_reg(R2, R10)), [0xbf, 0xa2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            bytes(add64_imm(R2, -4)),
            [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            bytes(store32(R10, -4, R0)),
            [0x63, 0x0a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(atomic_add64(R0, 0, R1)),
            [0xdb, 0x10, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(load_map_fd(R1, 7)[0]), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes(load_map_fd(R1, 7)[1]), [0; 8]);
        assert_eq!(bytes(jeq_imm(R0, 0, 2)), [0x15, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(call(1)), [0x85, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(bytes(exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }
}
