//! A tiny encoder for the BPF instructions the counting, sampling and
//! aggregating programs use (the opcode bits of the kernel's
//! `include/uapi/linux/bpf_common.h` and `bpf.h`, into an [`Insn`], the
//! `struct bpf_insn` of the bpf(2) ABI in `sys`), and [`Asm`], which
//! resolves forward jumps to labels.

pub(crate) use crate::sys::bpf::Insn;

/// A register, `r0` to `r10`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reg(u8);

/// The return value, and a helper's result.
pub(crate) const R0: Reg = Reg(0);
/// The first argument (on entry: the program's context).
pub(crate) const R1: Reg = Reg(1);
/// The second argument.
pub(crate) const R2: Reg = Reg(2);
/// The third argument.
pub(crate) const R3: Reg = Reg(3);
/// The fourth argument.
pub(crate) const R4: Reg = Reg(4);
/// Callee-saved registers: kept across helper calls.
pub(crate) const R6: Reg = Reg(6);
pub(crate) const R7: Reg = Reg(7);
pub(crate) const R8: Reg = Reg(8);
pub(crate) const R9: Reg = Reg(9);
/// The read-only frame pointer (the stack grows down from it).
pub(crate) const R10: Reg = Reg(10);

// Instruction classes.
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_STX: u8 = 0x03;
const BPF_JMP: u8 = 0x05;
const BPF_ALU64: u8 = 0x07;
/// A memory access's size: 1, 4 or 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    B = 0x10,
    W = 0x00,
    DW = 0x18,
}
const BPF_W: u8 = Size::W as u8;
const BPF_DW: u8 = Size::DW as u8;
// Modes.
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_ATOMIC: u8 = 0xc0;
// Operand source: the immediate or a register.
const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;
// ALU and jump operations.
const BPF_ADD: u8 = 0x00;
const BPF_SUB: u8 = 0x10;
const BPF_MUL: u8 = 0x20;
const BPF_AND: u8 = 0x50;
const BPF_LSH: u8 = 0x60;
const BPF_RSH: u8 = 0x70;
const BPF_ARSH: u8 = 0xc0;
const BPF_MOV: u8 = 0xb0;
const BPF_JA: u8 = 0x00;
const BPF_JEQ: u8 = 0x10;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
/// `src_reg` of a 64-bit immediate load whose immediate is a map's fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn::new(code, dst.0 | (src.0 << 4), off, imm)
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

/// `dst += src` (64-bit).
pub(crate) fn add64_reg(dst: Reg, src: Reg) -> Insn {
    insn(BPF_ALU64 | BPF_ADD | BPF_X, dst, src, 0, 0)
}

/// `dst -= imm` (64-bit).
pub(crate) fn sub64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_SUB | BPF_K, dst, R0, 0, imm)
}

/// `dst *= src` (64-bit).
pub(crate) fn mul64_reg(dst: Reg, src: Reg) -> Insn {
    insn(BPF_ALU64 | BPF_MUL | BPF_X, dst, src, 0, 0)
}

/// `dst &= imm` (64-bit).
pub(crate) fn and64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_AND | BPF_K, dst, R0, 0, imm)
}

/// `dst <<= imm` (64-bit).
pub(crate) fn lsh64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_LSH | BPF_K, dst, R0, 0, imm)
}

/// `dst >>= imm` (64-bit, logical).
pub(crate) fn rsh64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_RSH | BPF_K, dst, R0, 0, imm)
}

/// `dst >>= imm` (64-bit, arithmetic: the sign bit is copied).
pub(crate) fn arsh64_imm(dst: Reg, imm: i32) -> Insn {
    insn(BPF_ALU64 | BPF_ARSH | BPF_K, dst, R0, 0, imm)
}

/// `dst -= src` (64-bit).
pub(crate) fn sub64_reg(dst: Reg, src: Reg) -> Insn {
    insn(BPF_ALU64 | BPF_SUB | BPF_X, dst, src, 0, 0)
}

/// `dst = *(size *)(src + off)`, zero-extended.
pub(crate) fn load(size: Size, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(BPF_LDX | BPF_MEM | size as u8, dst, src, off, 0)
}

/// `*(size *)(dst + off) = src`.
pub(crate) fn store(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(BPF_STX | BPF_MEM | size as u8, dst, src, off, 0)
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

/// A conditional jump's comparison of a register with an immediate
/// (unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// `==`
    Eq = 0x10,
    /// `>`
    Gt = 0x20,
    /// `>=`
    Ge = 0x30,
    /// `!=`
    Ne = 0x50,
    /// `<` (signed)
    Slt = 0xc0,
}

/// `r0 = helper(r1, ..., r5)`.
pub(crate) fn call(helper: i32) -> Insn {
    insn(BPF_JMP | BPF_CALL, R0, R0, 0, helper)
}

/// `return r0`.
pub(crate) fn exit() -> Insn {
    insn(BPF_JMP | BPF_EXIT, R0, R0, 0, 0)
}

/// A place in a program that jumps go to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Label(usize);

/// A program being written: instructions, and jumps to labels that are
/// resolved by [`Asm::finish`].
#[derive(Debug, Default)]
pub(crate) struct Asm {
    insns: Vec<Insn>,
    /// Where each label is, once bound.
    labels: Vec<Option<usize>>,
    /// The jumps to resolve: instruction index and label.
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    /// Appends instructions.
    pub(crate) fn push(&mut self, insns: impl IntoIterator<Item = Insn>) {
        self.insns.extend(insns);
    }

    /// A new label, not yet bound to a place.
    pub(crate) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `label` to the next instruction.
    pub(crate) fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    /// `if dst CMP imm goto label`.
    pub(crate) fn jump_if(&mut self, dst: Reg, cmp: Cmp, imm: i32, label: Label) {
        self.jumps.push((self.insns.len(), label));
        self.insns
            .push(insn(BPF_JMP | cmp as u8 | BPF_K, dst, R0, 0, imm));
    }

    /// `if dst CMP src goto label` (two registers).
    pub(crate) fn jump_if_reg(&mut self, dst: Reg, cmp: Cmp, src: Reg, label: Label) {
        self.jumps.push((self.insns.len(), label));
        self.insns
            .push(insn(BPF_JMP | cmp as u8 | BPF_X, dst, src, 0, 0));
    }

    /// `goto label`.
    pub(crate) fn jump(&mut self, label: Label) {
        self.jumps.push((self.insns.len(), label));
        self.insns.push(insn(BPF_JMP | BPF_JA, R0, R0, 0, 0));
    }

    /// The instructions, every jump resolved. An error on a label never
    /// bound or a jump too far for its 16-bit offset: mistakes of this
    /// crate's program writers, found by their tests.
    pub(crate) fn finish(mut self) -> Result<Vec<Insn>, String> {
        for (at, label) in std::mem::take(&mut self.jumps) {
            let Some(to) = self.labels.get(label.0).copied().flatten() else {
                return Err(format!("instruction {at} jumps to a label never bound"));
            };
            let Ok(off) = i16::try_from(to as i64 - at as i64 - 1) else {
                return Err(format!("instruction {at} jumps beyond 32K instructions"));
            };
            if let Some(insn) = self.insns.get_mut(at) {
                insn.off = off;
            }
        }
        Ok(self.insns)
    }
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

    /// The smallest program the kernel facts load, spelled in `sys` as
    /// bare opcodes, is the encoder's `r0 = 0; exit`.
    #[test]
    fn the_return_zero_program_is_the_encoders() {
        use crate::sys::bpf::RETURN_ZERO;
        assert_eq!(RETURN_ZERO, [mov64_imm(R0, 0), exit()]);
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
        assert_eq!(
            bytes(load(Size::DW, R1, R6, 16)),
            [0x79, 0x61, 16, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(load(Size::B, R1, R8, 2)),
            [0x71, 0x81, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(store(Size::DW, R7, 24, R1)),
            [0x7b, 0x17, 24, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(add64_reg(R3, R2)), [0x0f, 0x23, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(mul64_reg(R2, R4)), [0x2f, 0x42, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(lsh64_imm(R2, 3)), [0x67, 0x02, 0, 0, 3, 0, 0, 0]);
        assert_eq!(bytes(and64_imm(R1, 1)), [0x57, 0x01, 0, 0, 1, 0, 0, 0]);
        assert_eq!(bytes(sub64_imm(R1, 5)), [0x17, 0x01, 0, 0, 5, 0, 0, 0]);
        assert_eq!(bytes(rsh64_imm(R3, 16)), [0x77, 0x03, 0, 0, 16, 0, 0, 0]);
        assert_eq!(bytes(arsh64_imm(R1, 56)), [0xc7, 0x01, 0, 0, 56, 0, 0, 0]);
        assert_eq!(bytes(sub64_reg(R9, R8)), [0x1f, 0x89, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn jumps_land_on_their_labels() {
        let mut a = Asm::default();
        let end = a.label();
        let back = a.label();
        a.bind(back);
        a.jump_if(R1, Cmp::Gt, 20, end); // 0
        a.push([mov64_imm(R0, 1)]); // 1
        a.jump(end); // 2
        a.push([mov64_imm(R0, 2)]); // 3
        a.bind(end);
        a.push([exit()]); // 4
        let p = a.finish().unwrap();
        assert_eq!(bytes(p[0]), [0x25, 0x01, 3, 0, 20, 0, 0, 0]);
        assert_eq!(bytes(p[2]), [0x05, 0, 1, 0, 0, 0, 0, 0]);
        let mut a = Asm::default();
        let end = a.label();
        a.jump_if_reg(R1, Cmp::Ge, R9, end);
        a.bind(end);
        a.push([exit()]);
        assert_eq!(
            bytes(a.finish().unwrap()[0]),
            [0x3d, 0x91, 0, 0, 0, 0, 0, 0]
        );
    }
}
