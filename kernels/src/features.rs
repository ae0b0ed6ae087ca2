//! What `usdt features --json` says, read through the library's own type
//! ([`FeatureReport`], which the command serializes): the one place the
//! matrix reads it. No text is parsed: a `usdt` that prints no report is a
//! failed check, logged.

pub use usdt_trace::FeatureReport;

/// The report `usdt features --json` printed, or why there is none.
pub fn from_json(text: &str) -> Result<FeatureReport, String> {
    serde_json::from_str(text.trim()).map_err(|e| format!("not a usdt features report: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_trace::{AutoAt, ForkVerdict, OptimizedNop};

    #[test]
    fn reads_the_report_of_6_18() {
        let f = from_json(
            r#"{"kernel":"6.18.44","machine":"x86_64","uprobe_syscall":"ENXIO","optimizes":"nop5","uprobe_multi":true,"uprobe_pmu":true,"kernel_semaphores":true,"tracefs":true,"fork_test":"child dies","fork_test_why":"a child forked after the kernel optimized a nop;nop5 site was killed by signal 11 (SIGSEGV) at its first hit","fork_test_guarded":"guarded","speed_test":{"trap":1.068,"optimized":0.811},"speed_test_why":null,"default_attach":{"nop5":"nop","nop10":"nop","nop5_nop10":"nop"},"default_attach_guarded":{"nop5":"nop","nop10":"nop","nop5_nop10":"nop"}}
"#,
        )
        .unwrap();
        assert_eq!(f.uprobe_syscall, "ENXIO");
        assert_eq!(f.optimizes, Some(OptimizedNop::Nop5));
        assert!(f.uprobe_multi);
        assert_eq!(f.fork_test, ForkVerdict::ChildDies);
        assert_eq!(f.fork_test_guarded, ForkVerdict::Guarded);
        assert_eq!(f.default_attach.nop5, AutoAt::Nop);
        assert_eq!(
            f.speed_test.map(|s| (s.trap, s.optimized)),
            Some((1.068, 0.811))
        );
    }

    #[test]
    fn text_is_not_a_report() {
        assert!(from_json("uprobe syscall: absent\nBPF uprobe_multi links: no\n").is_err());
        // A key the report does not have is not guessed either.
        assert!(from_json(r#"{"kernel":"6.1.0","uprobe_syscall":"ENOSYS"}"#).is_err());
    }
}
