"""Benchmark, tuning and experiment scripts that print numbers and write `docs/benchmarks.md`, `docs/experiments/`
and `docs/img/` (`make bench`): our kernels against the peer libraries, the service end to end, the drift picture;
never timed tests, and not part of the installed package."""
