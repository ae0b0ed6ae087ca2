//! `usdt serve`: hit counts and latency histograms, kept in BPF maps, on a
//! Prometheus endpoint (`/metrics`, OpenMetrics text) read at each scrape.

use std::path::Path;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use usdt_trace::bpf::ProbeCounter;
use usdt_trace::{
    escape, globs_match, AttachPoint, CountedValue, Filter, Histogram, Signatures, Site, Target,
};

use crate::answers::{run, Aggregates};
use crate::args::ServeArgs;
use crate::error::CliError;
use crate::filters;
use crate::latency::{KeyArg, LatencyAgg};
use crate::latency_by;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The `value` label of the series that sums a latency's values past the
/// --top.
const OTHER: &str = "other";

/// How long the server waits for a request before the loop looks at
/// signals and new mappings again.
const WAIT: Duration = Duration::from_millis(100);

/// `HOST:PORT`, with `:PORT` meaning every interface.
fn listen_address(listen: &str) -> String {
    match listen.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => listen.to_string(),
    }
}

/// The file a path names for the `binary` label: without the
/// `/proc/PID/root` prefix that opens a process's view of its files.
fn binary_label(path: &Path) -> String {
    let text = path.to_string_lossy();
    if let Some(rest) = text.strip_prefix("/proc/") {
        if let Some((_, file)) = rest.split_once("/root/") {
            return format!("/{file}");
        }
    }
    text.into_owned()
}

/// What one `serve` keeps: the hit counters per file, the latencies, and
/// the server.
struct Serving {
    server: tiny_http::Server,
    globs: Vec<String>,
    point: AttachPoint,
    /// `--if`: what the hit counts count.
    filter: Option<Filter>,
    hits: Vec<(String, ProbeCounter)>,
    latencies: Vec<Served>,
    /// How many values of each latency's BY get series of their own.
    top: usize,
    scrapes: u64,
}

/// One `--latency`: its binary (the first file with its sites), and the
/// values of its BY that have series of their own, chosen once and kept
/// (so that every series, "other" too, only grows).
struct Served {
    binary: Option<String>,
    latency: LatencyAgg,
    chosen: Vec<CountedValue>,
}

impl Aggregates for Serving {
    fn globs(&self) -> Vec<String> {
        if self.globs.is_empty() {
            return vec![];
        }
        let mut globs = self.globs.clone();
        for served in &self.latencies {
            globs.push(served.latency.start.clone());
            globs.push(served.latency.end.clone());
        }
        globs
    }

    /// `--if` on the sites whose hits are counted.
    fn check(&self, path: &Path, sites: &[&Site]) -> Result<(), CliError> {
        let counted: Vec<&Site> = sites
            .iter()
            .copied()
            .filter(|s| globs_match(&self.globs, &s.probe()))
            .collect();
        filters::check("--if", self.filter.as_ref(), path, &counted)
    }

    fn attach(
        &mut self,
        path: &Path,
        sites: &[&Site],
        sigs: &Signatures,
        target: Target,
    ) -> Result<(), CliError> {
        let counted: Vec<&Site> = sites
            .iter()
            .copied()
            .filter(|s| globs_match(&self.globs, &s.probe()))
            .collect();
        if !counted.is_empty() {
            let files = [(path, counted)];
            let counter = match &self.filter {
                Some(f) => ProbeCounter::attach_filtered(&files, self.point, target, f)?,
                None => ProbeCounter::attach(&files, self.point, target)?,
            };
            self.hits.push((binary_label(path), counter));
        }
        for served in &mut self.latencies {
            let latency = &mut served.latency;
            let before = latency.agg.as_ref().map_or(0, |a| a.sites());
            latency.attach(path, sites, sigs, target)?;
            if served.binary.is_none() && latency.agg.as_ref().map_or(0, |a| a.sites()) > before {
                served.binary = Some(binary_label(path));
            }
        }
        Ok(())
    }

    fn tick(&mut self, _wait: Duration) -> Result<(), CliError> {
        let request = match self.server.recv_timeout(WAIT) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => return Err(CliError::Scrape(e)),
        };
        let response = if request.url() == "/metrics" || request.url().starts_with("/metrics?") {
            self.scrapes += 1;
            let text = self.metrics()?;
            let header = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE)
                .map_err(|()| CliError::Exposition)?;
            tiny_http::Response::from_string(text).with_header(header)
        } else {
            tiny_http::Response::from_string("usdt serve: the metrics are at /metrics\n")
                .with_status_code(404)
        };
        // A scraper that went away: its next scrape gets a fresh answer.
        let _ = request.respond(response);
        Ok(())
    }
}

impl Serving {
    /// The exposition of every metric, read from the kernel now.
    fn metrics(&mut self) -> Result<String, CliError> {
        let mut snapshot = Snapshot::default();
        for (binary, counter) in &self.hits {
            for (probe, n) in counter.probe_counts()? {
                let (provider, name) = probe.split_once(':').unwrap_or(("", &probe));
                snapshot.hits.push((
                    vec![
                        ("binary".into(), binary.clone()),
                        ("provider".into(), provider.into()),
                        ("probe".into(), name.into()),
                    ],
                    n,
                ));
            }
        }
        for served in &mut self.latencies {
            let latency = &served.latency;
            let labels = vec![
                ("binary".into(), served.binary.clone().unwrap_or_default()),
                ("start".into(), latency.start.clone()),
                ("end".into(), latency.end.clone()),
            ];
            let (Some(by), Some(agg)) = (&latency.by, &latency.agg) else {
                snapshot.latencies.push((labels, latency.histogram()?));
                continue;
            };
            // Each value's, then the total (which holds them all).
            let values = agg.histograms_by()?;
            let total = latency.histogram()?;
            for (value, _) in &values {
                if served.chosen.len() < self.top && !served.chosen.contains(value) {
                    served.chosen.push(value.clone());
                }
            }
            let with = |value: String| {
                let mut l = labels.clone();
                l.push(("by".into(), by.clone()));
                l.push(("value".into(), value));
                l
            };
            let mine: Vec<&(CountedValue, Histogram)> = served
                .chosen
                .iter()
                .filter_map(|c| values.iter().find(|(v, _)| v == c))
                .collect();
            for (value, h) in &mine {
                snapshot
                    .latencies
                    .push((with(latency_by::label(value)), h.clone()));
            }
            let other = latency_by::rest(&total, mine.iter().map(|(_, h)| h));
            snapshot.latencies.push((with(OTHER.into()), other));
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(snapshot));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .map_err(|_| CliError::Exposition)?;
        Ok(text)
    }
}

/// Labels as name-value pairs.
type Labels = Vec<(String, String)>;

/// The values of one scrape.
#[derive(Debug, Default)]
struct Snapshot {
    hits: Vec<(Labels, u64)>,
    latencies: Vec<(Labels, Histogram)>,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut hits = encoder.encode_descriptor(
            "usdt_probe_hits",
            "Hits of a USDT probe, counted in the kernel.",
            None,
            MetricType::Counter,
        )?;
        for (labels, n) in &self.hits {
            ConstCounter::new(*n).encode(hits.encode_family(labels)?)?;
        }
        if self.latencies.is_empty() {
            return Ok(());
        }
        let mut latency = encoder.encode_descriptor(
            "usdt_latency",
            "Time from a start probe to the end probe of the same key, paired in the kernel.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (labels, h) in &self.latencies {
            // Bucket b holds [2^(b-1), 2^b) ns: below its upper bound.
            let mut buckets: Vec<(f64, u64)> = (0..Histogram::BUCKETS - 1)
                .map(|b| (Histogram::bounds(b).1 as f64 / 1e9, h.buckets[b]))
                .collect();
            buckets.push((f64::INFINITY, h.buckets[Histogram::BUCKETS - 1]));
            latency
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(h.sum as f64 / 1e9, h.count, &buckets, None)?;
        }
        Ok(())
    }
}

pub(crate) fn serve(args: ServeArgs) -> Result<i32, CliError> {
    let address = listen_address(&args.listen);
    let server = match tiny_http::Server::http(&address) {
        Ok(server) => server,
        Err(e) => {
            eprintln!(
                "usdt: cannot serve on {}: {}",
                escape(&args.listen),
                escape(&e.to_string())
            );
            return Ok(2);
        }
    };
    let point: AttachPoint = args.sites.attach.into();
    let latencies = args
        .latency
        .iter()
        .map(|l| {
            let key = KeyArg::parse(l.key.as_deref());
            Served {
                binary: None,
                latency: LatencyAgg::new(&l.start, &l.end, key, point).by(l.by.clone()),
                chosen: vec![],
            }
        })
        .collect();
    let mut serving = Serving {
        server,
        globs: args.globs,
        point,
        filter: filters::prepared(args.filter),
        hits: vec![],
        latencies,
        top: args.top,
        scrapes: 0,
    };
    let place = args.target.place();
    let shown = address.clone();
    let code = run(
        &place,
        args.sites.force_sites,
        &mut serving,
        args.duration,
        &|n, name| {
            eprintln!("usdt: serving {n} sites of {name} on http://{shown}/metrics; Ctrl-C stops")
        },
    )?;
    eprintln!("usdt: served {} scrapes", serving.scrapes);
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_labels() {
        assert_eq!(listen_address(":9464"), "0.0.0.0:9464");
        assert_eq!(listen_address("127.0.0.1:1"), "127.0.0.1:1");
        assert_eq!(
            binary_label(Path::new("/proc/42/root/usr/bin/app")),
            "/usr/bin/app"
        );
        assert_eq!(binary_label(Path::new("/usr/bin/app")), "/usr/bin/app");
    }
}
