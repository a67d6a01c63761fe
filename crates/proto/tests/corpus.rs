//! Runs the language-neutral request corpus through the parser and the
//! chunked decoder, the way a connection would: head, body, next request.
//!
//! Two corpora:
//! - `tests/http-corpus/{valid,invalid}`: ours; the `.expect` format is in
//!   `tests/http-corpus/README.md`.
//! - `../shared/corpus/gunicorn-requests/expectations.json`, when present:
//!   gunicorn's cases with default settings. Deliberate differences are in
//!   `GUNICORN_DIFFERENCES`, each with its reason; an entry that stops
//!   differing fails the test, so the list stays honest.

mod support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use support::json::{self, Json};
use tines_proto::{
    parse_request_head, BodyFraming, ChunkedDecoder, ChunkedEvent, HeadStatus, Limits, ParseError,
    RequestHead, Version,
};

/// Trailer limit used while decoding corpus bodies; no case comes near it.
const TRAILER_LIMIT: usize = 8192;

/// One request as the connection saw it.
#[derive(Debug)]
struct Seen {
    head: RequestHead,
    method: Vec<u8>,
    target: Vec<u8>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
}

/// How the connection ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Every byte was used (or the last request closed the connection).
    Clean,
    /// The input stopped inside a head or a body (the peer hung up early).
    Truncated,
    /// The head was refused.
    Head(ParseError),
    /// The chunked body was refused.
    Chunked(String),
}

/// Replays `input` as one connection. With `add_host`, an HTTP/1.1 head that
/// fails only for lack of Host gets `Host: corpus.test` spliced in after its
/// request line (and the added field is left out of `Seen::headers`).
fn replay(input: &[u8], add_host: bool) -> (Vec<Seen>, End, usize) {
    let mut buf = input.to_vec();
    let mut seen = Vec::new();
    let mut offset = 0;
    let mut hosts_added = 0;
    let limits = Limits::default();
    while offset < buf.len() {
        let mut head = RequestHead::new();
        let mut added = false;
        match parse_request_head(&buf[offset..], &limits, &mut head) {
            Err(ParseError::MissingHost) if add_host => {
                let line_end = offset + find(&buf[offset..], b"\r\n").expect("a complete head") + 2;
                buf.splice(line_end..line_end, b"Host: corpus.test\r\n".iter().copied());
                hosts_added += 1;
                added = true;
                if let Err(error) = parse_request_head(&buf[offset..], &limits, &mut head) {
                    return (seen, End::Head(error), hosts_added);
                }
            }
            Err(error) => return (seen, End::Head(error), hosts_added),
            Ok(HeadStatus::Partial) => return (seen, End::Truncated, hosts_added),
            Ok(HeadStatus::Complete) => {}
        }
        let at = &buf[offset..];
        let headers = head
            .headers
            .iter()
            .skip(usize::from(added))
            .map(|(n, v)| (n.of(at).to_vec(), v.of(at).to_vec()))
            .collect();
        let (method, target) = (head.method.of(at).to_vec(), head.target.of(at).to_vec());
        let mut pos = offset + head.head_len;
        let mut body = Vec::new();
        match head.body {
            BodyFraming::None => {}
            BodyFraming::Length(length) => {
                let length = usize::try_from(length).unwrap();
                if buf.len() - pos < length {
                    return (seen, End::Truncated, hosts_added);
                }
                body.extend_from_slice(&buf[pos..pos + length]);
                pos += length;
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new(TRAILER_LIMIT);
                loop {
                    match decoder.decode(&buf[pos..]) {
                        Err(error) => {
                            return (seen, End::Chunked(format!("{error:?}")), hosts_added)
                        }
                        Ok((used, ChunkedEvent::Data(range))) => {
                            body.extend_from_slice(&buf[pos + range.start..pos + range.end]);
                            pos += used;
                        }
                        Ok((_, ChunkedEvent::NeedMore)) => {
                            return (seen, End::Truncated, hosts_added)
                        }
                        Ok((used, ChunkedEvent::End)) => {
                            pos += used;
                            break;
                        }
                    }
                }
            }
        }
        let keep_alive = head.keep_alive();
        seen.push(Seen {
            head,
            method,
            target,
            headers,
            body,
        });
        offset = pos;
        if !keep_alive {
            break;
        }
    }
    (seen, End::Clean, hosts_added)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/http-corpus")
}

/// The `.http` cases of one corpus folder, sorted, with their `.expect` text.
/// A `.http` without a readable `.expect`, or an `.expect` without its `.http`,
/// is written to `report` instead of stopping the run.
fn cases(kind: &str, report: &mut String) -> Vec<(String, Vec<u8>, String)> {
    let dir = corpus_dir().join(kind);
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names: Vec<String> = files
        .iter()
        .filter_map(|name| name.strip_suffix(".http").map(str::to_owned))
        .collect();
    names.sort();
    for orphan in files.iter().filter_map(|f| f.strip_suffix(".expect")) {
        if !names.iter().any(|name| name == orphan) {
            writeln!(report, "{kind}/{orphan}.expect: no {orphan}.http beside it").unwrap();
        }
    }
    names
        .into_iter()
        .filter_map(|name| {
            let raw = std::fs::read(dir.join(format!("{name}.http"))).unwrap();
            match std::fs::read_to_string(dir.join(format!("{name}.expect"))) {
                Ok(expect) => Some((name, raw, expect)),
                Err(e) => {
                    writeln!(report, "{kind}/{name}.expect: {e}").unwrap();
                    None
                }
            }
        })
        .collect()
}

/// The meaningful lines of an `.expect` file, split into `---` sections.
fn sections(expect: &str) -> Vec<Vec<(&str, &str)>> {
    let mut out = vec![Vec::new()];
    for line in expect
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if line == "---" {
            out.push(Vec::new());
            continue;
        }
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        out.last_mut().unwrap().push((key, value));
    }
    out
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return Err(format!("odd hex {text:?}"));
    }
    pairs
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("bad hex {text:?}"))
        })
        .collect()
}

fn yes(value: &str) -> Result<bool, String> {
    match value {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(format!("expected yes or no, got {other:?}")),
    }
}

/// "what the .expect says" for a yes/no key, or its fault.
fn flag(value: &str, actual: bool) -> Result<String, String> {
    Ok(if actual == yes(value)? {
        value.to_owned()
    } else {
        "the opposite".to_owned()
    })
}

/// Checks one request against one section; returns what differs, including
/// lines of the section that cannot be read.
fn check_request(seen: &Seen, section: &[(&str, &str)]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut headers = Vec::new();
    let mut body = Vec::new();
    let head = &seen.head;
    for &(key, value) in section {
        let actual = match key {
            "method" => Ok(String::from_utf8_lossy(&seen.method).into_owned()),
            "target" => Ok(String::from_utf8_lossy(&seen.target).into_owned()),
            "version" => Ok(if head.version == Version::Http10 {
                "1.0"
            } else {
                "1.1"
            }
            .to_owned()),
            "body-framing" => Ok(match head.body {
                BodyFraming::None => "none".to_owned(),
                BodyFraming::Chunked => "chunked".to_owned(),
                BodyFraming::Length(n) => format!("length {n}"),
            }),
            "connection" => Ok(match head.connection {
                tines_proto::ConnectionOption::Default => "default",
                tines_proto::ConnectionOption::Close => "close",
                tines_proto::ConnectionOption::KeepAlive => "keep-alive",
            }
            .to_owned()),
            "keep-alive" => flag(value, head.keep_alive()),
            "expect-continue" => flag(value, head.expect_continue),
            "upgrade" => flag(value, head.upgrade),
            "header" | "header-hex" => {
                let Some((name, field)) = value.split_once(':') else {
                    faults.push(format!("{key} {value:?}: not `Name: value`"));
                    continue;
                };
                let field = field.trim_start();
                let field = if key == "header-hex" {
                    hex(field)
                } else {
                    Ok(field.as_bytes().to_vec())
                };
                match field {
                    Ok(field) => headers.push((name.as_bytes().to_vec(), field)),
                    Err(fault) => faults.push(format!("{key}: {fault}")),
                }
                continue;
            }
            "body-text" => {
                body.extend_from_slice(value.as_bytes());
                continue;
            }
            "body-hex" => {
                match hex(value) {
                    Ok(bytes) => body.extend_from_slice(&bytes),
                    Err(fault) => faults.push(format!("body-hex: {fault}")),
                }
                continue;
            }
            other => Err(format!("unknown key {other:?}")),
        };
        let actual = match actual {
            Ok(actual) => actual,
            Err(fault) => {
                faults.push(fault);
                continue;
            }
        };
        if actual != value {
            faults.push(format!("{key}: expected {value:?}, got {actual:?}"));
        }
    }
    if seen.headers != headers {
        faults.push(format!(
            "headers: expected {:?}, got {:?}",
            lossy_pairs(&headers),
            lossy_pairs(&seen.headers)
        ));
    }
    if seen.body != body {
        faults.push(format!(
            "body: expected {:?}, got {:?}",
            lossy(&body),
            lossy(&seen.body)
        ));
    }
    faults
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lossy_pairs(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (lossy(n), lossy(v))).collect()
}

/// Fails with every line of `report` (one per mismatch) and how many cases
/// they touch, so one run shows the whole picture.
fn finish(kind: &str, total: usize, report: &str) {
    if report.is_empty() {
        return;
    }
    let mut cases: Vec<&str> = report
        .lines()
        .filter_map(|line| line.split([':', ' ']).next())
        .collect();
    cases.dedup();
    panic!(
        "\n{report}\n{} of {total} {kind} cases do not match their .expect ({} mismatches)",
        cases.len(),
        report.lines().count()
    );
}

#[test]
fn parses_every_valid_case_as_expected() {
    let mut report = String::new();
    let cases = cases("valid", &mut report);
    assert!(cases.len() >= 10, "corpus missing?");
    for (name, raw, expect) in &cases {
        let (seen, end, _) = replay(raw, false);
        let sections = sections(expect);
        if end != End::Clean {
            writeln!(report, "valid/{name}: ended with {end:?}").unwrap();
            continue;
        }
        if seen.len() != sections.len() {
            writeln!(
                report,
                "valid/{name}: {} requests, expected {}",
                seen.len(),
                sections.len()
            )
            .unwrap();
            continue;
        }
        for (index, (request, section)) in seen.iter().zip(&sections).enumerate() {
            for fault in check_request(request, section) {
                writeln!(report, "valid/{name} request {index}: {fault}").unwrap();
            }
        }
    }
    finish("valid", cases.len(), &report);
}

#[test]
fn rejects_every_invalid_case_as_expected() {
    let mut report = String::new();
    let cases = cases("invalid", &mut report);
    assert!(cases.len() >= 10, "corpus missing?");
    for (name, raw, expect) in &cases {
        let (_, end, _) = replay(raw, false);
        let lines = sections(expect).concat();
        let outcomes = lines
            .iter()
            .filter(|(key, _)| matches!(*key, "status" | "chunked-error"))
            .count();
        if outcomes != 1 {
            writeln!(
                report,
                "invalid/{name}: needs exactly one `status` or `chunked-error` line, has {outcomes}"
            )
            .unwrap();
        }
        for (key, value) in lines {
            let ok = match (key, &end) {
                ("status", End::Head(error)) => error.status().to_string() == value,
                ("error", End::Head(error)) => format!("{error:?}") == value,
                ("chunked-error", End::Chunked(error)) => error == value,
                ("status" | "error" | "chunked-error", _) => false,
                (other, _) => {
                    writeln!(report, "invalid/{name}: unknown key {other:?}").unwrap();
                    continue;
                }
            };
            if !ok {
                writeln!(
                    report,
                    "invalid/{name}: expected {key} {value}, got {end:?}"
                )
                .unwrap();
            }
        }
    }
    finish("invalid", cases.len(), &report);
}

/// gunicorn cases where Tines deliberately answers differently.
const GUNICORN_DIFFERENCES: &[(&str, &str)] = &[
    ("valid/009", "Content-Length with Transfer-Encoding (even identity) is refused, RFC 9112 6.3"),
    ("valid/025", "gzip before chunked: 501, we decode no coding but chunked (RFC 9112 6.1)"),
    ("valid/025_line", "gzip before chunked: 501, as valid/025"),
    ("valid/rfc9112_smuggle_gzip_chunked_01", "gzip before chunked: 501, as valid/025"),
    ("valid/029", "identity is no longer a transfer coding (RFC 9112): 501"),
    ("valid/030", "identity before chunked: 501, as valid/029"),
    ("valid/rfc9112_smuggle_te_identity_chunked_01", "identity before chunked: 501, as valid/029"),
    ("valid/027", "raw UTF-8 in the request-target is not URI syntax (RFC 3986 2): 400"),
    ("valid/rfc9112_target_absolute_userinfo_01", "userinfo in an http URI is an error (RFC 9110 4.2.4)"),
    ("valid/099", "Content-Length 17914 but 8599 bytes follow (the .http decoding strips LF from the body): truncated"),
    ("invalid/003c", "`-bl` is a valid token method (RFC 9110 9.1); gunicorn's uppercase rule is its policy"),
    ("invalid/006", "the request line (4112 bytes) is within our 8190-byte limit (gunicorn: 4094)"),
    ("invalid/007", "gunicorn limits each field to 8190 bytes; we limit the whole head to 32 KiB"),
    ("invalid/008", "per-field limit, as invalid/007"),
    ("invalid/017", "per-field limit, as invalid/007"),
];

/// Expected header list of a gunicorn request: (NAME, value) as latin-1.
fn gunicorn_headers(request: &Json) -> Vec<(Vec<u8>, Vec<u8>)> {
    let pairs = request
        .get("headers")
        .and_then(Json::as_array)
        .unwrap_or(&[]);
    pairs
        .iter()
        .map(|pair| {
            let pair = pair.as_array().unwrap();
            (
                latin1(pair[0].as_str().unwrap()),
                latin1(pair[1].as_str().unwrap()),
            )
        })
        .collect()
}

/// gunicorn decodes bytes as latin-1; this turns its strings back into bytes.
fn latin1(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).expect("latin-1"))
        .collect()
}

/// Whether the replay matches one valid gunicorn case; the reason if not.
fn matches_gunicorn_valid(case: &Json, seen: &[Seen], end: &End) -> Result<(), String> {
    if *end != End::Clean {
        return Err(format!("ended with {end:?}"));
    }
    let expected = case
        .get("expect_requests")
        .and_then(Json::as_array)
        .unwrap();
    if seen.len() != expected.len() {
        return Err(format!(
            "{} requests, expected {}",
            seen.len(),
            expected.len()
        ));
    }
    for (request, want) in seen.iter().zip(expected) {
        let method = want.get("method").and_then(Json::as_str).unwrap();
        let target = want
            .get("uri")
            .and_then(|u| u.get("raw"))
            .and_then(Json::as_str)
            .unwrap();
        let version = want.get("version").and_then(Json::as_array).unwrap();
        let minor = version[1].as_f64().unwrap();
        let body = json::base64_decode(want.get("body_b64").and_then(Json::as_str).unwrap_or(""));
        // Names with `_` are parsed but dropped by the WSGI layer, as gunicorn drops them.
        let headers: Vec<(Vec<u8>, Vec<u8>)> = request
            .headers
            .iter()
            .filter(|(name, _)| !name.contains(&b'_'))
            .map(|(name, value)| (name.to_ascii_uppercase(), value.clone()))
            .collect();
        let actual_minor = if request.head.version == Version::Http10 {
            0.0
        } else {
            1.0
        };
        if request.method != latin1(method)
            || request.target != latin1(target)
            || actual_minor != minor
        {
            return Err(format!(
                "request line {:?} {:?}",
                lossy(&request.method),
                lossy(&request.target)
            ));
        }
        if headers != gunicorn_headers(want) {
            return Err(format!("headers {:?}", lossy_pairs(&headers)));
        }
        if request.body != body {
            return Err(format!("body {:?}", lossy(&request.body)));
        }
    }
    Ok(())
}

#[test]
fn agrees_with_the_shared_gunicorn_corpus_by_default_settings() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/gunicorn-requests/expectations.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!(
            "shared gunicorn corpus not found at {}: skipped",
            path.display()
        );
        return;
    };
    let document = json::parse(&text);
    let mut report = String::new();
    let (mut run, mut hosts_added, mut differences) = (0, 0, 0);
    for case in document.get("cases").and_then(Json::as_array).unwrap() {
        let has_settings =
            !matches!(case.get("settings"), Some(Json::Object(members)) if members.is_empty());
        if has_settings {
            continue;
        }
        run += 1;
        let name = case.get("name").and_then(Json::as_str).unwrap();
        let raw = json::base64_decode(case.get("raw_b64").and_then(Json::as_str).unwrap());
        // gunicorn's corpus predates our Host rule (RFC 9112 3.2): add one so
        // the rest of each case is still tested.
        let (seen, end, added) = replay(&raw, true);
        hosts_added += usize::from(added > 0);
        let outcome = if case.get("kind").and_then(Json::as_str) == Some("valid") {
            matches_gunicorn_valid(case, &seen, &end)
        } else if end == End::Clean {
            Err(format!("accepted {} request(s)", seen.len()))
        } else {
            Ok(())
        };
        let allowed = GUNICORN_DIFFERENCES
            .iter()
            .find(|(case_name, _)| *case_name == name);
        match (outcome, allowed) {
            (Ok(()), None) => {}
            (Err(_), Some(_)) => differences += 1,
            (Ok(()), Some((_, reason))) => writeln!(
                report,
                "{name}: listed as a difference ({reason}) but now agrees"
            )
            .unwrap(),
            (Err(why), None) => writeln!(report, "{name}: {why}").unwrap(),
        }
    }
    println!(
        "gunicorn corpus: {run} cases with default settings, {differences} deliberate differences, \
         {hosts_added} given a Host"
    );
    assert!(
        run > 100,
        "expected more than 100 default-settings cases, found {run}"
    );
    assert!(report.is_empty(), "\n{report}");
}

/// The case counts the docs state are the corpus's own, so they cannot drift as cases are
/// added: `docs/http-conformance.md` ("N named cases (V valid, I invalid)") and `README.md`
/// ("N-case corpus (V valid, I invalid)").
#[test]
fn the_docs_state_the_true_case_counts() {
    let mut report = String::new();
    let valid = cases("valid", &mut report).len();
    let invalid = cases("invalid", &mut report).len();
    let total = valid + invalid;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (doc, wanted) in [
        (
            "docs/http-conformance.md",
            format!("{total} named cases ({valid} valid, {invalid} invalid)"),
        ),
        (
            "README.md",
            format!("{total}-case corpus ({valid} valid, {invalid} invalid)"),
        ),
    ] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        // The README wraps its lines: compare with runs of whitespace made one space.
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains(&wanted), "{doc} should say {wanted:?}");
    }
}
