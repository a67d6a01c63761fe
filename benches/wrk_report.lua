-- wrk reporter for benches/run.py: after wrk's own summary, print one line
--   BENCH-JSON {...}
-- with the exact counters and latency percentiles (microseconds) from wrk's histogram, so the
-- harness never parses wrk's rounded, unit-suffixed human output.
-- Requests are left to wrk (no request()/response() hooks), so its C fast path is unchanged.

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
    '"latency_us": {"mean": %.1f, "stdev": %.1f, "max": %d, ' ..
    '"p50": %d, "p75": %d, "p90": %d, "p99": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.timeout, e.status,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99)))
end
