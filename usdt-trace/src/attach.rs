//! The uprobe opening the fork self-test uses, under the name it knows.

pub(crate) use crate::engine::perf::open_uprobe;
pub(crate) use crate::engine::Uprobe;
