//! The argument-string parser on arbitrary text, for both instruction sets:
//! an error or arguments whose text parses back to the same arguments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::{parse_args, Machine, Operand};

fuzz_target!(|text: &str| {
    for machine in [Machine::X86_64, Machine::Aarch64] {
        let Ok(args) = parse_args(text, machine) else {
            continue;
        };
        for arg in &args {
            assert!(matches!(arg.size, 1 | 2 | 4 | 8));
            // Immediates print in x86 form, so only x86 text round-trips whole.
            if machine == Machine::X86_64 || !matches!(arg.operand, Operand::Immediate(_)) {
                let again = parse_args(&arg.to_string(), machine).expect("printed arguments parse");
                assert_eq!(again, [*arg]);
            }
        }
    }
});
