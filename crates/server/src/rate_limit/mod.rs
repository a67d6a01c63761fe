//! Per-client rate limits (`rate_limit`, `rate_limit_paths`; docs/rate-limits.md, ADR 0038):
//! the settings ([`RateLimitConfig`]), the client's key (its address, an IPv6 one cut to
//! `rate_limit_ipv6_prefix` bits, and the rule, hashed with the table's seed), and the check
//! ([`RateLimiter::check`]) on the shared [`RateTable`] of GCRA buckets, with the fields of a
//! refusal's `429` (`Retry-After`, and `RateLimit-Policy` / `RateLimit` as
//! draft-ietf-httpapi-ratelimit-headers-11 ([`DRAFT`]) spells them).
//!
//! Which address is the client's (trusted proxies, the PROXY protocol) is decided by the
//! caller, as the app and the access log see it; this module only keys, counts and answers.
//! Must not: read requests, write responses, or cost anything when no limit is set (the worker
//! then holds no [`RateLimiter`] at all: one branch per request).

use std::net::IpAddr;
use std::sync::Arc;

use crate::trusted_proxies::{TrustedProxies, TrustedProxiesError};

pub mod connections;
pub mod table;

pub use connections::{ClientConnections, Opened};
pub use table::{Bucket, Decision, Found, RateTable};

/// The rule number of the connection cap's keys (the request rules' are their indices).
pub const CONNECTION_RULE: u64 = u64::MAX;

/// The revision of the IETF httpapi draft whose `RateLimit-Policy` and `RateLimit` fields a
/// `429` carries: -11 (23 May 2026), the latest on the IETF datatracker when this was
/// checked. A policy's quota `q` over window `w` is the bucket's burst over the time it takes
/// to refill ([`Rule::refill_secs`]); the `RateLimit` field's `t` is, as -11 defines it, the
/// seconds until more quota is made available (here: until one request is admitted again),
/// not until the whole quota is back.
pub const DRAFT: &str = "draft-ietf-httpapi-ratelimit-headers-11";

/// A rate: `count` requests per second, or per minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Requests per window (at least 1).
    pub count: u32,
    /// The window: 60 seconds when true, else 1.
    pub per_minute: bool,
}

impl Rate {
    /// Parses `N/s` or `N/m` (as the registry normalizes them).
    pub fn parse(text: &str) -> Option<Rate> {
        let (count, unit) = text.trim().split_once('/')?;
        let count: u32 = count.trim().parse().ok().filter(|&count| count > 0)?;
        let per_minute = match unit.trim() {
            "s" => false,
            "m" => true,
            _ => return None,
        };
        Some(Rate { count, per_minute })
    }

    /// The window in seconds (the policy's `w`).
    pub fn window_secs(&self) -> u64 {
        if self.per_minute {
            60
        } else {
            1
        }
    }

    /// Nanoseconds between two requests at this rate.
    pub fn interval_ns(&self) -> u64 {
        self.window_secs() * 1_000_000_000 / u64::from(self.count)
    }

    /// `rate_limit_burst`'s default: the rate's count per second, at least 1.
    pub fn default_burst(&self) -> u32 {
        (self.count / self.window_secs() as u32).max(1)
    }
}

/// A limit: a rate, and the requests admitted at once from a full bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The sustained rate.
    pub rate: Rate,
    /// The bucket's size (at least 1).
    pub burst: u32,
}

impl Rule {
    /// The time an emptied bucket takes to hold its whole burst again (burst x interval), in
    /// whole seconds rounded up, at least 1: the `w` of the policy whose `q` is the burst.
    pub fn refill_secs(&self) -> u64 {
        let bucket = self.bucket();
        bucket
            .interval_ns
            .saturating_mul(bucket.burst)
            .div_ceil(1_000_000_000)
            .max(1)
    }

    /// The bucket the table keeps for this rule.
    pub fn bucket(&self) -> Bucket {
        Bucket {
            interval_ns: self.rate.interval_ns(),
            burst: u64::from(self.burst.max(1)),
        }
    }
}

/// A rule for the paths under `prefix` (`rate_limit_paths`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    /// The path prefix, in normal form (`tines_proto::normal_prefix`): it holds a request
    /// whose normal path is it or under it, on a segment boundary.
    pub prefix: Vec<u8>,
    /// Its limit, on a bucket of its own per client.
    pub rule: Rule,
}

impl PathRule {
    /// Parses `PREFIX=RATE[:BURST]` (the burst defaulting as `rate_limit_burst` does).
    pub fn parse(text: &str) -> Option<PathRule> {
        let (prefix, rest) = text.trim().split_once('=')?;
        // Compared with requests' paths in normal form (decoded, `//` collapsed).
        let prefix = tines_proto::normal_prefix(prefix.as_bytes())?;
        let (rate, burst) = match rest.split_once(':') {
            Some((rate, burst)) => (rate, Some(burst.trim().parse::<u32>().ok()?)),
            None => (rest, None),
        };
        let rate = Rate::parse(rate)?;
        let burst = burst.unwrap_or_else(|| rate.default_burst());
        (burst > 0).then_some(PathRule {
            prefix,
            rule: Rule { rate, burst },
        })
    }
}

/// The rate-limit settings (the registry's "Rate limits" section), `WorkerConfig::rate_limit`.
#[derive(Clone, Debug)]
pub struct RateLimitConfig {
    /// `rate_limit` with `rate_limit_burst`; None: no limit but the path rules'.
    pub default: Option<Rule>,
    /// `rate_limit_paths`, in the order given.
    pub paths: Vec<PathRule>,
    /// `rate_limit_allow`: client networks never limited nor capped.
    pub allow: TrustedProxies,
    /// `rate_limit_ipv6_prefix`: the leading bits of an IPv6 address that name a client.
    pub ipv6_prefix: u8,
    /// `max_connections_per_client` (0: no cap).
    pub max_connections_per_client: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            default: None,
            paths: Vec::new(),
            allow: TrustedProxies::parse(&[]).expect("no entries parse"),
            ipv6_prefix: 64,
            max_connections_per_client: 0,
        }
    }
}

impl RateLimitConfig {
    /// Builds it from the settings' values (as the registry checked them; a value it would
    /// refuse is an error here too, naming the setting).
    pub fn parse(
        rate: Option<&str>,
        burst: Option<u32>,
        paths: &[String],
        allow: &[String],
        ipv6_prefix: u8,
        max_connections_per_client: u32,
    ) -> Result<RateLimitConfig, String> {
        let default = match rate {
            None => None,
            Some(text) => {
                let rate = Rate::parse(text).ok_or(format!("rate_limit: bad rate {text:?}"))?;
                let burst = burst.unwrap_or_else(|| rate.default_burst());
                if burst == 0 {
                    return Err("rate_limit_burst: must be a positive integer".into());
                }
                Some(Rule { rate, burst })
            }
        };
        let paths = paths
            .iter()
            .map(|text| PathRule::parse(text).ok_or(format!("rate_limit_paths: bad rule {text:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        let allow = TrustedProxies::parse(allow).map_err(|err: TrustedProxiesError| {
            format!(
                "rate_limit_allow: {}",
                err.to_string().replace("forwarded_allow_ips: ", "")
            )
        })?;
        if !(1..=128).contains(&ipv6_prefix) {
            return Err(format!(
                "rate_limit_ipv6_prefix: {ipv6_prefix} is not in 1..128"
            ));
        }
        Ok(RateLimitConfig {
            default,
            paths,
            allow,
            ipv6_prefix,
            max_connections_per_client,
        })
    }

    /// The key `max_connections_per_client` counts connection peer `ip` under (None: the
    /// peer is never capped: an allowed network). Grouped as the rate limits group clients.
    pub fn connection_key(&self, seed: u64, ip: IpAddr) -> Option<u64> {
        let ip = ip.to_canonical();
        (!self.allow.trusts(ip)).then(|| client_key(seed, ip, self.ipv6_prefix, CONNECTION_RULE))
    }

    /// Whether any request is limited (a rate, or a path rule).
    pub fn limits_requests(&self) -> bool {
        self.default.is_some() || !self.paths.is_empty()
    }
}

/// One rule as the limiter applies it.
struct Applied {
    prefix: Vec<u8>,
    bucket: Bucket,
    /// The `RateLimit-Policy` field's value, made once.
    policy: Vec<u8>,
    /// The policy's name, quoted (the `RateLimit` field's item).
    name: String,
}

impl Applied {
    fn new(prefix: &[u8], rule: Rule, name: String) -> Applied {
        let name = format!("\"{name}\"");
        Applied {
            prefix: prefix.to_vec(),
            bucket: rule.bucket(),
            policy: format!("{name};q={};w={}", rule.burst.max(1), rule.refill_secs()).into_bytes(),
            name,
        }
    }
}

/// A refused request: what its `429` says.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `Retry-After` (whole seconds, at least 1).
    pub retry_after: Vec<u8>,
    /// `RateLimit-Policy`.
    pub policy: Vec<u8>,
    /// `RateLimit`.
    pub limit: Vec<u8>,
}

impl Refusal {
    /// The response fields, in the order written.
    pub fn fields(&self) -> [(&[u8], &[u8]); 3] {
        [
            (b"Retry-After", &self.retry_after),
            (b"RateLimit-Policy", &self.policy),
            (b"RateLimit", &self.limit),
        ]
    }
}

/// What a check decided, for the caller's counters.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Served (no rule applies, the client is allowed, or its bucket admitted it); `found`
    /// when a bucket was looked up.
    Pass(Option<Found>),
    /// Refused with a `429`.
    Limited(Refusal, Found),
}

/// The worker's limiter: the rules and the shared table. Held only when some limit is set.
pub struct RateLimiter {
    table: Arc<RateTable>,
    seed: u64,
    /// The path rules, longest prefix first, then the default rule (empty prefix).
    rules: Vec<Applied>,
    /// Whether any rule has a prefix (else the request's path is never looked at).
    by_path: bool,
    /// The rule a request whose path has no normal form counts under: the strictest (the
    /// slowest sustained rate, then the smallest burst), so that no spelling escapes a limit.
    strictest: usize,
    allow: TrustedProxies,
    ipv6_prefix: u8,
}

impl RateLimiter {
    /// The limiter for `config` over `table`; None when `config` limits no request.
    pub fn new(config: &RateLimitConfig, table: Arc<RateTable>) -> Option<RateLimiter> {
        if !config.limits_requests() {
            return None;
        }
        let mut rules: Vec<Applied> = config
            .paths
            .iter()
            .enumerate()
            .map(|(index, path)| {
                Applied::new(&path.prefix, path.rule, format!("path-{}", index + 1))
            })
            .collect();
        // Longest first: the first match is the longest prefix (stable: the first given of
        // equal ones).
        rules.sort_by_key(|rule| std::cmp::Reverse(rule.prefix.len()));
        if let Some(rule) = config.default {
            rules.push(Applied::new(b"", rule, "default".into()));
        }
        let strictest = (0..rules.len())
            .max_by_key(|&index| {
                let bucket = rules[index].bucket;
                (bucket.interval_ns, std::cmp::Reverse(bucket.burst))
            })
            .unwrap_or(0);
        Some(RateLimiter {
            by_path: !config.paths.is_empty(),
            strictest,
            seed: table.seed(),
            table,
            rules,
            allow: config.allow.clone(),
            ipv6_prefix: config.ipv6_prefix,
        })
    }

    /// Counts one request for `target` (the request target as received: its path in normal
    /// form is matched against the rules' prefixes; one with no normal form counts under the
    /// strictest rule) from `client` at `now` (CLOCK_MONOTONIC ns). A request without a
    /// client address (a Unix-socket peer with no forwarded one) is not limited.
    pub fn check(&self, client: Option<IpAddr>, target: &[u8], now: u64) -> Verdict {
        let index = if !self.by_path {
            0
        } else {
            match tines_proto::NormalPath::of(target) {
                Ok(path) => {
                    match self
                        .rules
                        .iter()
                        .position(|rule| path.is_under(&rule.prefix))
                    {
                        Some(index) => index,
                        None => return Verdict::Pass(None),
                    }
                }
                Err(_) => self.strictest,
            }
        };
        let Some(client) = client.map(|ip| ip.to_canonical()) else {
            return Verdict::Pass(None);
        };
        if self.allow.trusts(client) {
            return Verdict::Pass(None);
        }
        let rule = &self.rules[index];
        let key = client_key(self.seed, client, self.ipv6_prefix, index as u64);
        match self.table.check(key, rule.bucket, now) {
            (Decision::Admit { .. }, found) => Verdict::Pass(Some(found)),
            (Decision::Refuse { wait_ns }, found) => {
                let seconds = wait_ns.div_ceil(1_000_000_000).max(1);
                Verdict::Limited(
                    Refusal {
                        retry_after: seconds.to_string().into_bytes(),
                        policy: rule.policy.clone(),
                        limit: format!("{};r=0;t={seconds}", rule.name).into_bytes(),
                    },
                    found,
                )
            }
        }
    }
}

/// The client's group: an IPv4 address whole, an IPv6 one cut to `ipv6_prefix` bits (its
/// canonical form: an IPv4-mapped IPv6 address is the IPv4 one).
pub fn client_group(client: IpAddr, ipv6_prefix: u8) -> (u64, u64) {
    match client.to_canonical() {
        IpAddr::V4(v4) => (4, u64::from(u32::from(v4))),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = match ipv6_prefix {
                0 => 0,
                128.. => bits,
                prefix => bits & (u128::MAX << (128 - u32::from(prefix))),
            };
            ((kept >> 64) as u64 ^ (6 << 56), kept as u64)
        }
    }
}

/// The table key of `client` under rule `rule`: its group and the rule, hashed with `seed`
/// (murmur3's finalizer chained over the words; never 0, the table's "unused", nor
/// [`table::CLAIMING`]). Not a MAC: the seed only keeps a client from choosing addresses
/// that crowd one probe window.
pub fn client_key(seed: u64, client: IpAddr, ipv6_prefix: u8, rule: u64) -> u64 {
    let (high, low) = client_group(client, ipv6_prefix);
    let hash = mix(mix(mix(seed ^ high) ^ low) ^ rule);
    hash.clamp(1, table::CLAIMING - 1)
}

fn mix(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn rates_and_rules_parse_as_the_registry_writes_them() {
        assert_eq!(
            Rate::parse("10/s"),
            Some(Rate {
                count: 10,
                per_minute: false
            })
        );
        assert_eq!(Rate::parse("90/m").unwrap().default_burst(), 1);
        assert_eq!(Rate::parse("120/m").unwrap().default_burst(), 2);
        assert_eq!(Rate::parse("120/m").unwrap().interval_ns(), 500_000_000);
        for bad in ["0/s", "10", "10/h", "x/s", ""] {
            assert_eq!(Rate::parse(bad), None, "{bad}");
        }
        let rule = PathRule::parse("/login=5/m:3").unwrap();
        assert_eq!(rule.prefix, b"/login");
        assert_eq!(rule.rule.burst, 3);
        assert_eq!(PathRule::parse("/api=20/s").unwrap().rule.burst, 20);
        assert_eq!(PathRule::parse("api=20/s"), None);
        assert_eq!(PathRule::parse("/api=20/s:0"), None);
    }

    #[test]
    fn ipv6_clients_are_grouped_by_their_prefix_and_ipv4_mapped_ones_are_ipv4() {
        let seed = 77;
        let a = client_key(seed, ip("2001:db8:1:2:aaaa::1"), 64, 0);
        let b = client_key(seed, ip("2001:db8:1:2:bbbb::2"), 64, 0);
        let c = client_key(seed, ip("2001:db8:1:3::1"), 64, 0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // With /128 each address is its own client.
        assert_ne!(
            client_key(seed, ip("2001:db8:1:2:aaaa::1"), 128, 0),
            client_key(seed, ip("2001:db8:1:2:bbbb::2"), 128, 0)
        );
        assert_eq!(
            client_key(seed, ip("::ffff:192.0.2.7"), 64, 0),
            client_key(seed, ip("192.0.2.7"), 64, 0)
        );
        assert_ne!(
            client_key(seed, ip("192.0.2.7"), 64, 0),
            client_key(seed, ip("192.0.2.8"), 64, 0)
        );
        // Rules and seeds part the keys.
        assert_ne!(a, client_key(seed, ip("2001:db8:1:2::"), 64, 1));
        assert_ne!(a, client_key(seed + 1, ip("2001:db8:1:2::"), 64, 0));
    }

    fn limiter(
        rate: Option<&str>,
        burst: Option<u32>,
        paths: &[&str],
        allow: &[&str],
    ) -> RateLimiter {
        let paths: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let config = RateLimitConfig::parse(rate, burst, &paths, &allow, 64, 0).unwrap();
        RateLimiter::new(&config, Arc::new(RateTable::create(1024, 9).unwrap())).unwrap()
    }

    #[test]
    fn a_refusal_carries_retry_after_and_the_draft_s_fields() {
        let limiter = limiter(Some("2/s"), Some(1), &[], &[]);
        let now = 5_000_000_000;
        assert_eq!(
            limiter.check(Some(ip("192.0.2.1")), b"/", now),
            Verdict::Pass(Some(Found::New))
        );
        let Verdict::Limited(refusal, Found::Existing) =
            limiter.check(Some(ip("192.0.2.1")), b"/", now)
        else {
            panic!("not limited");
        };
        assert_eq!(
            refusal.fields(),
            [
                (&b"Retry-After"[..], &b"1"[..]),
                (b"RateLimit-Policy", b"\"default\";q=1;w=1"),
                (b"RateLimit", b"\"default\";r=0;t=1"),
            ]
        );
    }

    #[test]
    fn the_policy_states_the_burst_over_its_refill_time() {
        let policy = |rate: &str, burst: u32| {
            limiter(Some(rate), Some(burst), &[], &[]).rules[0]
                .policy
                .clone()
        };
        // 10/s with a burst of 20 admits 20 at once, and is full again 2 s after being emptied.
        assert_eq!(policy("10/s", 20), b"\"default\";q=20;w=2");
        assert_eq!(policy("1/m", 1), b"\"default\";q=1;w=60");
        assert_eq!(policy("5/m", 3), b"\"default\";q=3;w=36");
        // Rounded up to a whole second.
        assert_eq!(policy("10/s", 5), b"\"default\";q=5;w=1");
        assert_eq!(policy("3/s", 2), b"\"default\";q=2;w=1");
    }

    #[test]
    fn the_longest_path_prefix_wins_with_a_bucket_of_its_own_and_allowed_networks_pass() {
        let limiter = limiter(
            Some("100/s"),
            None,
            &["/api=1/m:1", "/api/login=1/m:2"],
            &["10.0.0.0/8"],
        );
        let client = Some(ip("192.0.2.9"));
        let now = 1_000_000_000;
        // /api/login: two at once, its own bucket.
        for _ in 0..2 {
            assert!(matches!(
                limiter.check(client, b"/api/login?x", now),
                Verdict::Pass(_)
            ));
        }
        let Verdict::Limited(refusal, _) = limiter.check(client, b"/api/login", now) else {
            panic!("not limited");
        };
        assert_eq!(refusal.policy, b"\"path-2\";q=2;w=120");
        assert_eq!(refusal.retry_after, b"60");
        // /api: one, untouched by /api/login's.
        assert!(matches!(
            limiter.check(client, b"/api/x", now),
            Verdict::Pass(_)
        ));
        assert!(matches!(
            limiter.check(client, b"/api/x", now),
            Verdict::Limited(..)
        ));
        // Elsewhere: the default rule.
        assert!(matches!(limiter.check(client, b"/", now), Verdict::Pass(_)));
        // Allowed networks and address-less clients are never counted.
        for _ in 0..5 {
            assert_eq!(
                limiter.check(Some(ip("10.1.2.3")), b"/api/x", now),
                Verdict::Pass(None)
            );
            assert_eq!(limiter.check(None, b"/api/x", now), Verdict::Pass(None));
        }
    }

    #[test]
    fn path_rules_match_the_normal_path_on_a_segment_boundary() {
        let limiter = limiter(None, None, &["/login=1/m:1", "//%61ccount/=1/m:1"], &[]);
        let now = 0;
        let mut client = 0;
        let mut from = |target: &[u8]| {
            client += 1;
            let ip = Some(IpAddr::from([192, 0, 2, client]));
            (
                limiter.check(ip, target, now),
                limiter.check(ip, target, now),
            )
        };
        // Every spelling of /login (absolute-form, escaped, doubled slashes, a query, under
        // it) is counted: the second request from a client is refused.
        for target in [
            &b"/login"[..],
            b"http://example.com/login",
            b"HTTP://example.com//login?x=1",
            b"/%6cogin",
            b"/%6Cog%69n/",
            b"//login/step2",
            b"/account/",
            b"/%61ccount/settings",
        ] {
            let (first, second) = from(target);
            assert!(matches!(first, Verdict::Pass(Some(_))), "{target:?}");
            assert!(matches!(second, Verdict::Limited(..)), "{target:?}");
        }
        // A neighbour on no segment boundary is not.
        // A prefix ending in `/` holds its subtree only.
        for target in [
            &b"/loginx"[..],
            b"/logins/x",
            b"/x/login",
            b"/accounts",
            b"/account",
        ] {
            let (first, second) = from(target);
            assert_eq!(first, Verdict::Pass(None), "{target:?}");
            assert_eq!(second, Verdict::Pass(None), "{target:?}");
        }
    }

    #[test]
    fn a_path_with_no_normal_form_counts_under_the_strictest_rule() {
        let limiter = limiter(
            Some("100/s"),
            Some(100),
            &["/api=10/s:10", "/login=1/m:2", "/slow=1/m:5"],
            &[],
        );
        let client = Some(ip("192.0.2.50"));
        // The strictest: 1/m, then the smaller burst: /login's two.
        let targets: [&[u8]; 3] = [b"/log%2Fin", b"/x/../login", b"/%zz"];
        for target in targets.iter().take(2) {
            assert!(
                matches!(limiter.check(client, target, 0), Verdict::Pass(Some(_))),
                "{target:?}"
            );
        }
        let Verdict::Limited(refusal, _) = limiter.check(client, targets[2], 0) else {
            panic!("not limited");
        };
        assert!(refusal.policy.starts_with(b"\"path-2\""));
        // The same bucket as /login's.
        assert!(matches!(
            limiter.check(client, b"/login", 0),
            Verdict::Limited(..)
        ));
        assert!(matches!(
            limiter.check(Some(ip("192.0.2.51")), b"/login%00", 0),
            Verdict::Pass(Some(_))
        ));
    }

    #[test]
    fn path_rules_alone_leave_other_paths_unlimited() {
        let limiter = limiter(None, None, &["/login=1/m"], &[]);
        let client = Some(ip("192.0.2.9"));
        for _ in 0..10 {
            assert_eq!(limiter.check(client, b"/", 0), Verdict::Pass(None));
        }
        assert!(matches!(
            limiter.check(client, b"/login", 0),
            Verdict::Pass(Some(_))
        ));
        assert!(matches!(
            limiter.check(client, b"/login", 0),
            Verdict::Limited(..)
        ));
    }
}
