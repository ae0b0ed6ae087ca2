//! The probe site and its note: the one assembly template every probe uses.
//!
//! ```text
//! 990:  90                 nop     <- the note's Location: every tracer may attach here
//!       0f 1f 44 00 00     nop5    <- Location + 1: optimized on Linux 6.18 - 7.2
//!       66 2e 0f 1f 84 00 00 00 00 00
//!                          nop10   <- Location + 6: optimized on the 7.3 series
//!       (feature `nop5` alone: the nop5 only; `nop10` alone: the nop10 only,
//!        at Location + 1)
//!
//! aarch64:  1f 20 03 d5        nop     <- Location, the site
//! riscv64:  13 00 00 00        nop     <- Location, the site (4 bytes, never `c.nop`)
//! elsewhere (Windows, macOS, wasm, 32-bit targets): no site, no note; a probe
//! evaluates its eager arguments and nothing of a lazy one
//!
//! .note.stapsdt (one note per emitted site, exactly as sys/sdt.h writes it;
//! SHF_LINK_ORDER to the site's text section, so the linker's --gc-sections
//! drops the note with the code):
//!       namesz = 8, descsz, type = 3 (NT_STAPSDT), "stapsdt\0", padding to 4
//!       Location   8 bytes   address of the nop (990b)
//!       Base       8 bytes   address of .stapsdt.base, for prelink-style adjustment
//!       Semaphore  8 bytes   address of the probe's 2-byte counter, or 0
//!       "provider\0" "name\0" "SIZE@REG SIZE@REG ...\0", padding to 4
//! ```
//!
//! On x86-64 Linux a site with a nop5 (`nop; nop5`, `nop; nop5; nop10`) also
//! references the fork guard (see `fork_guard_reloc`), so that every program
//! with such a site links it.
//!
//! The generated code picks the architecture with `#[cfg]` in the expansion,
//! never by looking at the host the macro runs on.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use usdt_runtime::SiteLayout;

/// The operating systems whose targets have a site on x86-64, aarch64 and
/// riscv64: ELF targets whose assembler takes GNU syntax. Elsewhere (Windows,
/// macOS, wasm, 32-bit targets, bare metal) probes compile to nothing but
/// their arguments.
fn os_cfg() -> TokenStream {
    quote!(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly",
        target_os = "illumos",
        target_os = "solaris"
    ))
}

/// x86-64 Linux: the sites with a nop5 reference the fork guard, which
/// usdt-runtime builds for exactly these targets (`forkguard`).
fn x86_64_linux_cfg() -> TokenStream {
    quote!(all(target_arch = "x86_64", target_os = "linux"))
}

/// x86-64 ELF targets other than Linux: the same site, without the fork
/// guard (the kernel behaviour it answers is Linux's).
fn x86_64_other_cfg() -> TokenStream {
    let os = os_cfg();
    quote!(all(target_arch = "x86_64", #os, not(target_os = "linux")))
}

pub fn x86_64_cfg() -> TokenStream {
    let os = os_cfg();
    quote!(all(target_arch = "x86_64", #os))
}

pub fn aarch64_cfg() -> TokenStream {
    let os = os_cfg();
    quote!(all(target_arch = "aarch64", #os))
}

pub fn riscv64_cfg() -> TokenStream {
    let os = os_cfg();
    quote!(all(target_arch = "riscv64", #os))
}

/// The targets without a site: probes compile to nothing but their arguments.
pub fn unsupported_cfg() -> TokenStream {
    let (x, a, r) = (x86_64_cfg(), aarch64_cfg(), riscv64_cfg());
    quote!(not(any(#x, #a, #r)))
}

/// `SiteLayout::...` of this build's sites, chosen by the same `#[cfg]`s as
/// the sites themselves: `layout` is the path of the `SiteLayout` type.
pub fn site_layout(layout: &TokenStream) -> TokenStream {
    let (x86_cfg, arm_cfg, riscv_cfg, none_cfg) = (
        x86_64_cfg(),
        aarch64_cfg(),
        riscv64_cfg(),
        unsupported_cfg(),
    );
    let x86 = format_ident!("{}", format!("{:?}", x86_64_layout()));
    quote! {{
        #[cfg(#x86_cfg)]
        const LAYOUT: #layout = #layout::#x86;
        #[cfg(any(#arm_cfg, #riscv_cfg))]
        const LAYOUT: #layout = #layout::Nop;
        #[cfg(#none_cfg)]
        const LAYOUT: #layout = #layout::NoSite;
        LAYOUT
    }}
}

/// What one site is: the strings of its note.
pub struct Site<'a> {
    /// The facade crate's path (`::usdt`), which names `ProbeArg`.
    pub krate: &'a TokenStream,
    pub provider: &'a str,
    pub name: &'a str,
    /// The semaphore's symbol (provider probes), or `None` (ad-hoc probes).
    pub semaphore: Option<&'a str>,
    pub nargs: usize,
    /// The argument names and types (provider probes), recorded in
    /// `.usdt.signatures` beside the note; `None` for ad-hoc probes.
    pub signature: Option<&'a crate::signature::Signature>,
}

/// The symbol of a provider probe's semaphore. Hidden and merged by name within
/// one linked object, distinct across crates: the defining crate's name is part
/// of it (`.` cannot occur in any of the parts, so no two triples collide).
pub fn semaphore_symbol(krate: &str, provider: &str, probe: &str) -> String {
    format!("__usdt_sema.{krate}.{provider}.{probe}")
}

/// `fn __usdt_site<A0: ProbeArg, ..>(a0: A0, ..)`: the site, inlined into each
/// caller, so that every emitted copy carries its own note.
pub fn site_fn(site: &Site) -> TokenStream {
    let krate = site.krate;
    let arg = quote!(#krate::__private::ProbeArg);
    let tys: Vec<_> = (0..site.nargs).map(|i| format_ident!("A{i}")).collect();
    let vals: Vec<_> = (0..site.nargs).map(|i| format_ident!("a{i}")).collect();
    let sizes: Vec<_> = (0..site.nargs).map(|i| format_ident!("s{i}")).collect();
    let widths: Vec<_> = (0..site.nargs).map(|i| format_ident!("w{i}")).collect();
    let kinds = site
        .signature
        .map(|sig| crate::signature::kind_operands(sig, &tys, krate))
        .unwrap_or_default();
    // The operands every architecture's template names: each argument's
    // register and its size in the note (negative when signed).
    let operands = quote! {
        #(#vals = in(reg) #arg::value(&#vals),
          #sizes = const <#tys as #arg>::SIZE,)*
        #(#kinds,)*
    };
    // x86-64 also picks the register's name by the value's width.
    let x86_operands = quote! {
        #operands
        #(#widths = const <#tys as #arg>::WIDTH,)*
    };
    let x86_linux = lines(&x86_64_template(site, true));
    let x86_other = lines(&x86_64_template(site, false));
    let arm = lines(&aarch64_template(site));
    let riscv = lines(&riscv64_template(site));
    let (x86_linux_cfg, x86_other_cfg) = (x86_64_linux_cfg(), x86_64_other_cfg());
    let (arm_cfg, riscv_cfg, none_cfg) = (aarch64_cfg(), riscv64_cfg(), unsupported_cfg());
    quote! {
        #[inline(always)]
        #[allow(clippy::too_many_arguments, clippy::needless_pass_by_value)]
        fn __usdt_site<#(#tys: #arg),*>(#(#vals: #tys),*) {
            // SAFETY: the template is nops, which change no register, flag or
            // memory, and a note in a non-allocated section. Options: no `nostack`
            // (the kernel's optimized path turns the long nop into a `call`,
            // which writes below the stack pointer, so the compiler must keep
            // nothing in the red zone here); no `nomem`/`readonly` (a tracer reads
            // the pointees of pointer arguments, and a debugger may write
            // memory, so stores before the site must happen); no
            // `preserves_flags` (what runs at the site while traced is the
            // kernel's business, and promising nothing costs nothing).
            #[cfg(#x86_linux_cfg)]
            unsafe {
                ::core::arch::asm!(#(#x86_linux,)* #x86_operands options(att_syntax));
            }
            // SAFETY: as above, without the fork guard's relocation.
            #[cfg(#x86_other_cfg)]
            unsafe {
                ::core::arch::asm!(#(#x86_other,)* #x86_operands options(att_syntax));
            }
            // SAFETY: as above: one `nop` and a note; same choice of options.
            #[cfg(#arm_cfg)]
            unsafe {
                ::core::arch::asm!(#(#arm,)* #operands options());
            }
            // SAFETY: as above: one 4-byte `nop` and a note; same choice of
            // options.
            #[cfg(#riscv_cfg)]
            unsafe {
                ::core::arch::asm!(#(#riscv,)* #operands options());
            }
            #[cfg(#none_cfg)]
            {
                let _ = (#(#vals,)*);
            }
        }
    }
}

fn lines(lines: &[String]) -> Vec<syn::LitStr> {
    lines
        .iter()
        .map(|l| syn::LitStr::new(l, proc_macro2::Span::call_site()))
        .collect()
}

/// `.byte 0x0f, 0x1f, ...`: the bytes exactly.
fn byte_directive(bytes: &[u8]) -> String {
    let bytes: Vec<String> = bytes.iter().map(|b| format!("{b:#04x}")).collect();
    format!(".byte {}", bytes.join(", "))
}

/// The x86-64 layout the cargo features choose: `nop; nop5; nop10` by
/// default (each kernel generation that optimizes a long nop finds its
/// own), `nop; nop5` with `nop5` alone, `nop; nop10` with `nop10` alone.
fn x86_64_layout() -> SiteLayout {
    let nop5 = cfg!(feature = "nop5");
    let nop10 = cfg!(feature = "nop10");
    if cfg!(feature = "nop5-nop10") || nop5 == nop10 {
        SiteLayout::NopNop5Nop10
    } else if nop10 {
        SiteLayout::NopNop10
    } else {
        SiteLayout::NopNop5
    }
}

/// The x86-64 site; `fork_guard`: with the fork guard's relocation (Linux),
/// where the site has a nop5.
fn x86_64_template(site: &Site, fork_guard: bool) -> Vec<String> {
    use usdt_runtime::site::{NOP, NOP10, NOP5, X86_64_LOW8_WRITTEN_WHOLE};
    // `nop5-nop10` carries both long nops (the nop5 at Location + 1, the
    // nop10 at Location + 6), so that each kernel generation finds its own.
    let long_nops: &[&[u8]] = match x86_64_layout() {
        SiteLayout::NopNop5Nop10 => &[&NOP5, &NOP10],
        SiteLayout::NopNop10 => &[&NOP10],
        _ => &[&NOP5],
    };
    // The bytes are spelled out: an assembler is free to shorten a mnemonic
    // `nopl 0x0(%rax,%rax,1)`, and the kernel optimizes only these encodings.
    let mut l = vec![format!("990: {}", byte_directive(&NOP))];
    l.extend(long_nops.iter().map(|b| byte_directive(b)));
    base_reloc(&mut l);
    if fork_guard && long_nops.contains(&&NOP5[..]) {
        fork_guard_reloc(&mut l);
    }
    // `.irp r, %r8b, %r9b, ...`: the low bytes a note names by the whole
    // register (see `X86_64_LOW8_WRITTEN_WHOLE`).
    let low8: Vec<String> = X86_64_LOW8_WRITTEN_WHOLE
        .iter()
        .map(|(low8, _)| format!("%{low8}"))
        .collect();
    let irp_low8 = format!(".irp r, {}", low8.join(", "));
    note(&mut l, site, "@", |i| {
        // The register at the argument's exact width: `.if` on the width
        // constant picks the operand modifier (al, ax, eax, rax). A 1-byte
        // value in a register whose low byte has no name every consumer
        // reads (r8..r15, see `X86_64_LOW8_WRITTEN_WHOLE`) is written with
        // the 64-bit name (`1@%r8`): each consumer takes the low byte, as
        // the size says.
        vec![
            format!(".if {{w{i}}} == 1"),
            ".set .L__usdt_wide, 0".to_owned(),
            irp_low8.clone(),
            format!(".ifc {{a{i}:l}}, \\r"),
            ".set .L__usdt_wide, 1".to_owned(),
            ".endif".to_owned(),
            ".endr".to_owned(),
            ".if .L__usdt_wide".to_owned(),
            format!(".ascii \"{{s{i}}}@{{a{i}:r}}\""),
            ".else".to_owned(),
            format!(".ascii \"{{s{i}}}@{{a{i}:l}}\""),
            ".endif".to_owned(),
            format!(".elseif {{w{i}}} == 2"),
            format!(".ascii \"{{s{i}}}@{{a{i}:x}}\""),
            format!(".elseif {{w{i}}} == 4"),
            format!(".ascii \"{{s{i}}}@{{a{i}:e}}\""),
            ".else".to_owned(),
            format!(".ascii \"{{s{i}}}@{{a{i}:r}}\""),
            ".endif".to_owned(),
        ]
    });
    signature(&mut l, site, "@");
    l
}

fn aarch64_template(site: &Site) -> Vec<String> {
    let mut l = vec!["990: nop".to_owned()];
    base_reloc(&mut l);
    // Consumers name aarch64 registers by their 64-bit `x` form, with the size
    // before the `@` telling how many low bytes hold the value.
    note(&mut l, site, "%", |i| {
        vec![format!(".ascii \"{{s{i}}}@{{a{i}:x}}\"")]
    });
    signature(&mut l, site, "%");
    l
}

fn riscv64_template(site: &Site) -> Vec<String> {
    let mut l = vec![
        // The 4-byte `nop` (`addi x0, x0, 0`: `13 00 00 00`), never the
        // 2-byte `c.nop` an assembler picks where the C extension is on (as
        // for sys/sdt.h's probes on riscv64gc).
        ".option push".to_owned(),
        ".option norvc".to_owned(),
        "990: nop".to_owned(),
        ".option pop".to_owned(),
    ];
    base_reloc(&mut l);
    // sys/sdt.h names riscv64 registers by their ABI names (`a0`, `t1`,
    // `s2`), which have no narrower forms: the size before the `@` tells how
    // many low bytes hold the value.
    note(&mut l, site, "%", |i| {
        vec![format!(".ascii \"{{s{i}}}@{{a{i}}}\"")]
    });
    signature(&mut l, site, "%");
    l
}

/// Appends the signature record, if the site has one, after the note.
fn signature(l: &mut Vec<String>, site: &Site, ty: &str) {
    if let Some(sig) = site.signature {
        l.extend(crate::signature::template(
            site.provider,
            site.name,
            sig,
            ty,
        ));
    }
}

/// Appends the note (and `.stapsdt.base`) to a site's template. `ty` is the
/// prefix of section types (`@` on x86-64, `%` where `@` starts a comment).
fn note(l: &mut Vec<String>, site: &Site, ty: &str, arg: impl Fn(usize) -> Vec<String>) {
    let semaphore = site.semaphore.unwrap_or("0");
    l.extend([
        // A label in this site's text section with a name unique in the
        // object file: `.L__usdt_sites` counts the notes assembled so far, and
        // `.altmacro`'s `%(expr)` turns the count into the label's name. (A
        // numeric label like 990 cannot be named in a section directive.)
        ".ifndef .L__usdt_sites".to_owned(),
        ".set .L__usdt_sites, 0".to_owned(),
        ".endif".to_owned(),
        ".set .L__usdt_sites, .L__usdt_sites + 1".to_owned(),
        ".macro __usdt_note_start __usdt_n".to_owned(),
        ".L__usdt_site_\\__usdt_n:".to_owned(),
        // The note section: not allocated, so it costs the program nothing,
        // and SHF_LINK_ORDER ("o") linked to the site's text section, so that
        // when `--gc-sections` removes the function the note goes with it
        // (otherwise its Location would be 0 or a stale offset, which breaks
        // tracers that attach to every note of a probe). LLD and GNU ld both
        // drop such a note with its text section.
        format!(".pushsection .note.stapsdt, \"o\", {ty}note, .L__usdt_site_\\__usdt_n"),
        ".endm".to_owned(),
        ".altmacro".to_owned(),
        "__usdt_note_start %(.L__usdt_sites)".to_owned(),
        ".noaltmacro".to_owned(),
        // Macros outlive an asm block in LLVM: remove it for the next site.
        ".purgem __usdt_note_start".to_owned(),
        ".balign 4".to_owned(),
        // Note header: name size, descriptor size, NT_STAPSDT.
        ".4byte 992f - 991f, 994f - 993f, 3".to_owned(),
        "991: .asciz \"stapsdt\"".to_owned(),
        "992: .balign 4".to_owned(),
        // Location: the first nop of this copy of the site.
        "993: .8byte 990b".to_owned(),
        // Base: consumers compare it with .stapsdt.base to detect relocation.
        ".8byte _.stapsdt.base".to_owned(),
        format!(".8byte {semaphore}"),
        format!(".asciz \"{}\"", site.provider),
        format!(".asciz \"{}\"", site.name),
    ]);
    for i in 0..site.nargs {
        if i > 0 {
            l.push(".ascii \" \"".to_owned());
        }
        l.extend(arg(i));
    }
    l.extend([
        // The argument string's NUL.
        ".byte 0".to_owned(),
        "994: .balign 4".to_owned(),
        ".popsection".to_owned(),
        // .stapsdt.base: our one-byte member, once per object file (the
        // `.L` marker) and once per linked object (a COMDAT group).
        // Allocated and executable ("ax"), so that every linker puts the
        // output section in the code segment, beside the sites: perf turns
        // Location into a file offset with this section's own offset minus
        // Base, which is right only when the section and the sites share a
        // segment's vaddr - offset (LLD maps read-only and code sections at
        // different ones). Retained ("R"), so `--gc-sections` keeps it
        // although only the non-allocated note refers to it. The group is
        // ours, not sys/sdt.h's `.stapsdt.base`: a read-only member of that
        // group (a C object, the `probe` crate) linked first would replace
        // ours; beside it, the one output section is executable.
        ".ifndef .L__usdt_stapsdt_base".to_owned(),
        ".set .L__usdt_stapsdt_base, 1".to_owned(),
        format!(".pushsection .stapsdt.base, \"axGR\", {ty}progbits, __usdt_stapsdt_base, comdat"),
        // `_.stapsdt.base` itself, hidden and weak as sys/sdt.h defines it,
        // unless another probe library's template in this object file
        // already did (in a member placed before this one).
        ".ifndef _.stapsdt.base".to_owned(),
        ".weak _.stapsdt.base".to_owned(),
        ".hidden _.stapsdt.base".to_owned(),
        "_.stapsdt.base:".to_owned(),
        ".endif".to_owned(),
        ".space 1".to_owned(),
        ".popsection".to_owned(),
        ".endif".to_owned(),
    ]);
}

/// A relocation of no effect (R_X86_64_NONE, R_AARCH64_NONE, R_RISCV_NONE) from the
/// site's nop to `_.stapsdt.base`: the code that holds a site keeps
/// `.stapsdt.base` alive under `--gc-sections` even where a linker ignores
/// the retain flag. It changes no byte.
fn base_reloc(l: &mut Vec<String>) {
    l.push(".reloc 990b, BFD_RELOC_NONE, _.stapsdt.base".to_owned());
}

/// A relocation of no effect (R_X86_64_NONE) from the site's nop to the fork
/// guard's entry in `.init_array` (usdt-runtime's `forkguard`): every program
/// with a site that has a nop5 (`nop; nop5`, `nop; nop5; nop10`) links the guard, which keeps a forked child alive
/// where the kernel optimized the site but does not copy its trampoline on
/// fork. The linker takes the guard's object file from the runtime's rlib for
/// this reference, and `--gc-sections` keeps it. It changes no byte.
fn fork_guard_reloc(l: &mut Vec<String>) {
    let symbol = usdt_runtime::forkguard::SYMBOL;
    l.push(format!(".reloc 990b, BFD_RELOC_NONE, {symbol}"));
}

/// The semaphore itself: a 2-byte, 2-byte-aligned counter in `.probes`, which
/// the kernel increments while a uprobe with `ref_ctr_offset` is attached.
pub fn semaphore_def(symbol: &str) -> TokenStream {
    let (x86_cfg, arm_cfg, riscv_cfg) = (x86_64_cfg(), aarch64_cfg(), riscv64_cfg());
    let body = |ty: &str, page_shift: u32| {
        lines(&[
            // The `.probes` output section starts on a page of its own: one
            // empty, page-aligned member, once per linked object (COMDAT).
            // The kernel finds a semaphore by file offset in every writable
            // mapping of the file; when a linker (LLD) ends the RELRO segment
            // and starts the data segment in the same file page, that page is
            // mapped twice, and at exec the kernel would increment the
            // RELRO copy (corrupting it) instead of the semaphore. Costs at
            // most one page of padding.
            ".ifndef __usdt_probes_anchor".to_owned(),
            format!(".pushsection .probes, \"awGR\", {ty}progbits, __usdt_probes_anchor, comdat"),
            format!(".p2align {page_shift}"),
            ".weak __usdt_probes_anchor".to_owned(),
            ".hidden __usdt_probes_anchor".to_owned(),
            "__usdt_probes_anchor:".to_owned(),
            ".popsection".to_owned(),
            ".endif".to_owned(),
            // Once per object file, although a crate may declare the same
            // provider:probe twice.
            format!(".ifndef {symbol}"),
            // Writable, in a COMDAT group named by the symbol (so that two
            // definitions of the same provider:probe in one crate share one
            // counter), and retained: only notes may refer to it.
            format!(".pushsection .probes, \"awGR\", {ty}progbits, {symbol}, comdat"),
            ".balign 2".to_owned(),
            format!(".weak {symbol}"),
            format!(".hidden {symbol}"),
            format!(".type {symbol}, {ty}object"),
            format!(".size {symbol}, 2"),
            format!("{symbol}: .2byte 0"),
            ".popsection".to_owned(),
            ".endif".to_owned(),
        ])
    };
    // Page sizes: x86-64 and riscv64 4 KiB; aarch64 kernels may use 4, 16
    // or 64 KiB pages.
    let (x86, arm, riscv) = (body("@", 12), body("%", 16), body("%", 12));
    quote! {
        #[cfg(#x86_cfg)]
        ::core::arch::global_asm!(#(#x86),*, options(att_syntax));
        #[cfg(#arm_cfg)]
        ::core::arch::global_asm!(#(#arm),*);
        #[cfg(#riscv_cfg)]
        ::core::arch::global_asm!(#(#riscv),*);
    }
}

/// A function `fn #name() -> bool`: is the semaphore non-zero, that is, is a
/// tracer attached.
pub fn semaphore_fn(symbol: &str, name: &syn::Ident, vis: TokenStream) -> TokenStream {
    let (x86_cfg, arm_cfg) = (x86_64_cfg(), aarch64_cfg());
    let (riscv_cfg, none_cfg) = (riscv64_cfg(), unsupported_cfg());
    let x86 = format!("movzwl {symbol}(%rip), {{0:e}}");
    let arm = [
        format!("adrp {{0}}, {symbol}"),
        format!("ldrh {{0:w}}, [{{0}}, :lo12:{symbol}]"),
    ];
    let riscv = [
        format!("995: auipc {{0}}, %pcrel_hi({symbol})"),
        "lhu {0}, %pcrel_lo(995b)({0})".to_owned(),
    ];
    // aarch64 and riscv64: the same load in their own instructions.
    let load = |cfg: TokenStream, asm: &[String]| {
        quote! {
            #[cfg(#cfg)]
            {
                let count: u64;
                // SAFETY: as on x86-64: a fresh 2-byte load of the semaphore.
                unsafe {
                    ::core::arch::asm!(#(#asm),*, out(reg) count,
                        options(nostack, readonly, preserves_flags));
                }
                count != 0
            }
        }
    };
    let (arm, riscv) = (load(arm_cfg, &arm), load(riscv_cfg, &riscv));
    quote! {
        #[inline(always)]
        #[allow(non_snake_case)] // `order__placed_enabled`: `__` is a dash in the note
        #vis fn #name() -> bool {
            #[cfg(#x86_cfg)]
            {
                let count: u32;
                // SAFETY: a 2-byte load of the semaphore, which `semaphore_def`
                // defines in this crate; the kernel writes it, so this is a
                // fresh (volatile) load every time: the asm is not `pure`.
                // `nostack`: this is not a probe site, nothing runs here but
                // the load; `readonly`: it writes no memory.
                unsafe {
                    ::core::arch::asm!(#x86, out(reg) count,
                        options(att_syntax, nostack, readonly, preserves_flags));
                }
                count != 0
            }
            #arm
            #riscv
            #[cfg(#none_cfg)]
            {
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The low bytes named by the whole register come from the runtime's
    /// table and spell the same directive as always.
    #[test]
    fn the_low_byte_list_is_the_runtimes() {
        let site = Site {
            krate: &quote!(::usdt),
            provider: "p",
            name: "n",
            semaphore: None,
            nargs: 1,
            signature: None,
        };
        let irp: Vec<String> = x86_64_template(&site, true)
            .into_iter()
            .filter(|l| l.starts_with(".irp"))
            .collect();
        assert_eq!(
            irp,
            [".irp r, %r8b, %r9b, %r10b, %r11b, %r12b, %r13b, %r14b, %r15b"]
        );
    }
}
