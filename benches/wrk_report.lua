-- wrk reporter for benches/run.py: after wrk's own summary, print one line
--   BENCH-JSON {...}
-- with the exact counters and latency percentiles (microseconds) from wrk's histogram, so the
-- harness never parses wrk's rounded, unit-suffixed human output (benches/loadgen.py maps it
-- onto the fields of `tines bench --json`).
-- This file defines no request()/response() hooks, so wrk's C fast path is unchanged; the
-- pipelined variant (loadgen.wrk_script) appends a request() hook to a copy of it.

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
    '"latency_us": {"min": %d, "mean": %.1f, "stdev": %.1f, "max": %d, ' ..
    '"p50": %d, "p75": %d, "p90": %d, "p99": %d, "p99_9": %d, "p99_99": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.timeout, e.status,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency:percentile(99.99)))
end
