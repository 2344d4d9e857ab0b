//! The object service's `/metrics` series in Prometheus text.

use super::*;

impl Objects {
    /// The object service's series in Prometheus text (spec §7 metrics): transfers active,
    /// queued, admitted and refused by class, time spent queued, bytes in flight, object bytes
    /// in and out, chunk bytes stored, chunk versions collected.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let a = self.admission.stats();
        let classes = meridian_blob::admission::TransferClass::ALL;
        let mut family = |name: &str, kind: &str, help: &str, values: &[u64]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (c, v) in classes.iter().zip(values) {
                let _ = writeln!(out, "{name}{{class=\"{}\"}} {v}", c.as_str());
            }
        };
        let usize_to = |v: [usize; 3]| v.map(|x| x as u64);
        family(
            "meridian_blob_active",
            "gauge",
            "Transfers running, by class.",
            &usize_to(a.active),
        );
        family(
            "meridian_blob_queued",
            "gauge",
            "Transfers waiting for a slot, by class.",
            &usize_to(a.queued),
        );
        family(
            "meridian_blob_admitted_total",
            "counter",
            "Transfers admitted, by class.",
            &a.admitted_total,
        );
        family(
            "meridian_blob_rejected_total",
            "counter",
            "Transfers refused with TooManyTransfers, by class.",
            &a.rejected_total,
        );
        let scalar = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        scalar(
            out,
            "meridian_blob_queue_wait_us_total",
            "counter",
            "Time transfers spent queued, microseconds.",
            a.queue_wait_us_total,
        );
        scalar(
            out,
            "meridian_blob_inflight_bytes",
            "gauge",
            "Chunk bytes in flight.",
            self.inflight.in_use(),
        );
        let _ = writeln!(
            out,
            "# HELP meridian_blob_bytes_total Object bytes received and sent.\n\
             # TYPE meridian_blob_bytes_total counter\n\
             meridian_blob_bytes_total{{dir=\"in\"}} {}\n\
             meridian_blob_bytes_total{{dir=\"out\"}} {}",
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed)
        );
        scalar(
            out,
            "meridian_blob_stored_bytes",
            "gauge",
            "Chunk bytes this node stores.",
            self.chunk_store().stored_bytes(),
        );
        scalar(
            out,
            "meridian_blob_gc_deleted_total",
            "counter",
            "Chunk versions deleted by garbage collection.",
            self.gc_deleted.load(Ordering::Relaxed),
        );
    }
}
