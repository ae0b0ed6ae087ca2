//! A kernel for unit tests: while [`with`] runs, every [`Syscall`] made on
//! this thread goes to the test's function instead, which answers with a
//! value or an `errno` (or `None`: make the real call).

use std::cell::RefCell;

use super::Syscall;

type Fake = Box<dyn FnMut(&Syscall<'_>) -> Option<Result<i64, i32>>>;

thread_local! {
    static FAKE: RefCell<Option<Fake>> = const { RefCell::new(None) };
}

/// Runs `body` with `fake` answering this thread's system calls.
pub(crate) fn with<R>(
    fake: impl FnMut(&Syscall<'_>) -> Option<Result<i64, i32>> + 'static,
    body: impl FnOnce() -> R,
) -> R {
    let previous = FAKE.with(|f| f.borrow_mut().replace(Box::new(fake)));
    let result = body();
    FAKE.with(|f| *f.borrow_mut() = previous);
    result
}

/// The fake's answer to `call`, if a fake is in place and answers it.
pub(super) fn answer(call: &Syscall<'_>) -> Option<Result<i64, i32>> {
    FAKE.with(|f| f.borrow_mut().as_mut().and_then(|fake| fake(call)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::perf::counter::PerfCounter;
    use crate::{AttachCause, AttachPoint, Error, KernelFeatures, Site, SiteLayout, Target};

    fn site() -> Site {
        Site::at_0x1000(SiteLayout::NopNop5)
    }

    fn features() -> KernelFeatures {
        KernelFeatures {
            uprobe_syscall: crate::UprobeSyscall::Absent,
            uprobe_pmu_type: Some(8),
            kernel_semaphores: true,
            ref_ctr_offset_shift: Some(32),
            optimized_fork: crate::OptimizedFork::Untested,
        }
    }

    /// Attaches one site with the kernel refusing `perf_event_open` with
    /// `errno`.
    fn refused(errno: i32, target: Target) -> Error {
        let mut counter = PerfCounter::new(AttachPoint::Nop).with_features(features());
        with(
            move |call| matches!(call, Syscall::PerfEventOpen { .. }).then_some(Err(errno)),
            || counter.attach("/bin/app", [&site()], target),
        )
        .unwrap_err()
    }

    /// The cause of an attach error, checked to name the file, probe and
    /// Location.
    fn cause(e: Error) -> AttachCause {
        match e {
            Error::Attach(e) => {
                assert_eq!(
                    (e.path.to_str(), e.probe.as_str(), e.location),
                    (Some("/bin/app"), "p:n", 0x1000)
                );
                e.cause
            }
            e => panic!("not an attach error: {e}"),
        }
    }

    #[test]
    fn each_refusal_of_the_kernel_is_its_own_error() {
        let pid = Target::Pid(7);
        assert!(matches!(
            cause(refused(libc::EACCES, pid)),
            AttachCause::NotPermitted
        ));
        let gone = refused(libc::ESRCH, pid);
        assert_eq!(gone.no_process(), Some(7));
        assert!(matches!(cause(gone), AttachCause::NoProcess(7)));
        assert!(matches!(
            cause(refused(524, pid)),
            AttachCause::InstructionRefused
        ));
        assert!(matches!(
            cause(refused(libc::EOVERFLOW, pid)),
            AttachCause::SemaphoreOutOfRange
        ));
        match cause(refused(libc::EIO, Target::AllProcesses)) {
            AttachCause::Syscall(source) => {
                assert_eq!(source.call, "perf_event_open");
                assert_eq!(source.raw_os_error(), Some(libc::EIO));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_refused_site_reaches_no_system_call_unless_forced() {
        let mut site = site();
        site.check = crate::SiteCheck::Refused(crate::SiteRefusal::LocationNotExecutable);
        let mut counter = PerfCounter::new(AttachPoint::Nop).with_features(features());
        let e = with(
            |call| panic!("no system call for a refused site: {call:?}"),
            || counter.attach("/bin/app", [&site], Target::Pid(7)),
        )
        .unwrap_err();
        assert!(matches!(
            cause(e),
            AttachCause::SiteRefused(crate::SiteRefusal::LocationNotExecutable)
        ));
        site.force();
        let asked = with(
            |call| matches!(call, Syscall::PerfEventOpen { .. }).then_some(Err(libc::EIO)),
            || counter.attach("/bin/app", [&site], Target::Pid(7)),
        );
        assert!(matches!(cause(asked.unwrap_err()), AttachCause::Syscall(_)));
    }

    #[test]
    fn a_kernel_without_bpf_is_unsupported_not_a_message() {
        let e = with(
            |call| matches!(call, Syscall::Bpf { .. }).then_some(Err(libc::ENOSYS)),
            || crate::bpf::MultiCounter::new(4).unwrap_err(),
        );
        assert!(matches!(e, crate::bpf::BpfError::Unsupported), "{e}");
        let e = crate::Error::from(e);
        assert!(matches!(e, Error::Bpf(crate::bpf::BpfError::Unsupported)));
    }

    /// Attaches `site` with the engines `picked`, counting (`false`) or
    /// sampling (`true`), with the kernel answering `fake`.
    fn attach_with(
        picked: &crate::Picked,
        sampling: bool,
        fake: impl FnMut(&Syscall<'_>) -> Option<Result<i64, i32>> + 'static,
    ) -> Error {
        let site = site();
        let files = [(std::path::PathBuf::from("/bin/app"), vec![&site])];
        with(fake, || match sampling {
            false => {
                crate::Counter::attach(picked, &files, AttachPoint::Nop, Target::Pid(7), &|| false)
                    .unwrap_err()
            }
            true => crate::Sampler::new(AttachPoint::Nop)
                .engine(picked.clone())
                .attach("/bin/app", [&site], Target::Pid(7))
                .unwrap_err(),
        })
    }

    #[test]
    fn auto_reports_both_engines_when_both_fail() {
        let picked = crate::Picked {
            engines: vec![crate::EngineKind::Bpf, crate::EngineKind::Perf],
            fallback: None,
        };
        // Counting and sampling fall back alike: one choice for both.
        for sampling in [false, true] {
            let e = attach_with(&picked, sampling, |call| match call {
                Syscall::Bpf { .. } => Some(Err(libc::ENOSYS)),
                Syscall::PerfEventOpen { .. } => Some(Err(libc::EACCES)),
                _ => None,
            });
            match e {
                Error::BothEngines { bpf, perf } => {
                    assert!(matches!(bpf, crate::bpf::BpfError::Unsupported));
                    assert!(
                        matches!(
                            &*perf,
                            Error::Attach(e) if matches!(e.cause, AttachCause::NotPermitted | AttachCause::NoUprobePmu)
                        ),
                        "{perf}"
                    );
                }
                e => panic!("sampling {sampling}: {e}"),
            }
        }
        // Asked for by the caller, BPF is not replaced.
        let asked = crate::Picked::only(crate::EngineKind::Bpf);
        for sampling in [false, true] {
            let e = attach_with(&asked, sampling, |call| {
                matches!(call, Syscall::Bpf { .. }).then_some(Err(libc::ENOSYS))
            });
            assert!(
                matches!(e, Error::Bpf(crate::bpf::BpfError::Unsupported)),
                "sampling {sampling}: {e}"
            );
        }
    }

    #[test]
    fn a_failed_fork_names_the_call() {
        let e = with(
            |call| matches!(call, Syscall::Fork).then_some(Err(libc::EAGAIN)),
            || crate::PausedCommand::spawn("/bin/true".as_ref(), &[]).unwrap_err(),
        );
        match e {
            Error::Syscall { source, .. } => assert_eq!(source.call, "fork"),
            e => panic!("{e}"),
        }
    }
}
