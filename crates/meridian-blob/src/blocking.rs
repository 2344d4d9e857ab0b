//! The blocking work of large objects — chunk-store file I/O and digests — on a bounded
//! number of threads.
//!
//! Why: tokio's blocking pool grows to 512 threads. Hundreds of concurrent transfers each
//! with a file write or a digest pending made it do so, and every thread kept its own stack
//! and allocator heap resident (measured: ~250 MiB for 500 threads with 768 uploads). Past a
//! few dozen jobs at once, more threads add no disk or CPU throughput on any machine this
//! runs on, so jobs beyond [`MAX_JOBS`] wait their turn instead.

use tokio::sync::Semaphore;
use tokio::task::JoinError;

/// Blocking jobs of this crate's callers running at once, per process.
pub const MAX_JOBS: usize = 32;

static JOBS: Semaphore = Semaphore::const_new(MAX_JOBS);

/// Runs `f` on tokio's blocking pool once fewer than [`MAX_JOBS`] such jobs run.
pub async fn run<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, JoinError> {
    // The semaphore is never closed. The permit is held until the job's thread is idle
    // again, so the next job finds it instead of starting another thread.
    let _permit = JOBS.acquire().await.ok();
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_max_jobs_run_at_once() {
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static PEAK: AtomicUsize = AtomicUsize::new(0);
        let jobs: Vec<_> = (0..MAX_JOBS * 3)
            .map(|_| {
                tokio::spawn(run(|| {
                    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
                    PEAK.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    RUNNING.fetch_sub(1, Ordering::SeqCst);
                }))
            })
            .collect();
        for j in jobs {
            j.await.unwrap().unwrap();
        }
        let peak = PEAK.load(Ordering::SeqCst);
        assert!(peak <= MAX_JOBS, "{peak} jobs ran at once");
        assert!(peak > 1, "jobs ran one at a time");
    }
}
