//! The CPUs of this machine: the online ones (perf events per CPU) and
//! the possible ones (a per-CPU BPF map holds one value for each).

use std::io;

/// The online CPUs (`/sys/devices/system/cpu/online`, such as `0-3,6`).
pub fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = parse_cpu_list(&text);
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n as i32).collect();
    }
    cpus
}

pub(crate) fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut cpus = vec![];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        match (a.parse::<i32>(), b.parse::<i32>()) {
            (Ok(a), Ok(b)) if a <= b && b - a < 65536 => cpus.extend(a..=b),
            _ => return vec![],
        }
    }
    cpus
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, such as
/// `0-3`): a per-CPU map holds one value for each.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(&text)
        .into_iter()
        .max()
        .map(|last| last as usize + 1)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cannot read the CPU list \"{}\"", text.trim()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,7"), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpu_list("x"), Vec::<i32>::new());
    }

    #[test]
    fn possible_cpus_are_read() {
        assert!(possible_cpus().unwrap() >= 1);
    }
}
