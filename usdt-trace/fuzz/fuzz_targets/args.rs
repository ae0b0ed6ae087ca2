//! The argument-string parser on arbitrary text, for every instruction set:
//! an error (only for a string too long or with too many arguments), or
//! arguments of a known size (or unreadable, with a reason) whose text
//! parses back to the same arguments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::{parse_args, Machine, Operand, ARG_SIZES};

fuzz_target!(|text: &str| {
    for machine in [Machine::X86_64, Machine::Aarch64, Machine::Riscv64] {
        let Ok(args) = parse_args(text, machine) else {
            continue;
        };
        for arg in &args {
            match &arg.operand {
                Operand::Unreadable { text, reason } => {
                    assert!(!text.is_empty() && !reason.is_empty());
                }
                Operand::Symbol { addr, .. } | Operand::SymbolIndexed { addr, .. } => {
                    assert!(addr.is_none())
                }
                _ => {}
            }
            assert!(ARG_SIZES.contains(&arg.size) || arg.unreadable().is_some());
            assert!(!arg.float || matches!(arg.size, 4 | 8) || arg.unreadable().is_some());
            // Immediates print in x86 form, so only x86 text round-trips whole.
            if machine == Machine::X86_64 || !matches!(arg.operand, Operand::Immediate(_)) {
                let again = parse_args(&arg.to_string(), machine).expect("printed arguments parse");
                assert_eq!(again, [arg.clone()]);
            }
        }
    }
});
