//! Design files (spec `experiments.md` §1): factors, levels and fixed parameters; resumable factorial runs and their reports.
