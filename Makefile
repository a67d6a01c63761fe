# Tines: every set-up step lives here, so a fresh machine needs only `make serve` / `make test`.
# Needs: python3 (3.10+) with venv and pip, and a Rust toolchain (cargo). `make wheel` builds the
# wheel that installs on other machines without either toolchain.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
HOST   ?= 127.0.0.1
PORT   ?= 8000
STAMP  := $(VENV)/.deps-stamp
RUST_SOURCES := $(shell find crates -name '*.rs' -o -name Cargo.toml) Cargo.toml pyproject.toml
PYTHON_SOURCES := $(shell find python -name '*.py' -o -name '*.pyi' -o -name py.typed) README.md
ZIG_STAMP := $(VENV)/.zig-stamp
WHEEL_STAMP := dist/.wheel-stamp

.PHONY: all build wheel serve chat test test-rust test-python typecheck bench bench-full bench-tls bench-h2 bench-edge bench-isolation bench-ab bench-tool bench-deploy bench-tune fuzz fmt lint clean docs

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Development dependencies (maturin to build, pytest & co. to test, Flask for the blog;
# cryptography makes the TLS tests' certificates, sslyze scans the TLS server; h2 gives httpx
# HTTP/2 and the HTTP/2 tests their frames; brotli and zstandard decode the compression tests' bodies;
# FastAPI and PyYAML are what the migration tests run: a FastAPI app, a YAML --log-config).
$(STAMP): $(PY) pyproject.toml Makefile
	$(PIP) install --quiet "maturin>=1.7,<2" "pytest>=8" "pytest-timeout>=2.3" "httpx>=0.27" "flask>=3" "prometheus_client>=0.20" "starlette>=0.37" "python-multipart>=0.0.9" "uvloop>=0.19" "websockets>=12" "django>=4.2" "mypy>=1.10" "cryptography>=42" "sslyze>=6" "h2>=4" "brotli>=1.1" "zstandard>=0.22" "fastapi>=0.110" "pyyaml>=6"
	touch $(STAMP)

# The extension, built in release mode and installed (editable) into the virtualenv; it also
# puts the `tines` command on the venv's PATH.
$(VENV)/.build-stamp: $(STAMP) $(RUST_SOURCES)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release --quiet
	touch $@

build: $(VENV)/.build-stamp

# zig (the ziglang package on PyPI) links the wheel against glibc 2.28's symbols whatever the
# build machine's glibc, so the wheel is honestly manylinux_2_28 (RHEL 8+, Debian 10+, Ubuntu 20.04+).
$(ZIG_STAMP): $(STAMP)
	$(PIP) install --quiet "ziglang>=0.17,<0.18"
	touch $@

# dist/tines-VERSION-cp310-abi3-manylinux_2_28_ARCH.whl: release, abi3 (one wheel for CPython
# 3.10+), installable with `pip install dist/tines-*.whl` and no Rust. Built in its own target
# directory, so that `make build`'s artifacts (linked without zig) are not rebuilt after it.
$(WHEEL_STAMP): $(ZIG_STAMP) $(RUST_SOURCES) $(PYTHON_SOURCES)
	rm -f dist/tines-*.whl
	PATH=$(abspath $(VENV))/bin:$$PATH CARGO_TARGET_DIR=target/wheel $(VENV)/bin/maturin build \
		--release --zig --compatibility manylinux_2_28 --out dist --quiet
	touch $@

wheel: $(WHEEL_STAMP)

# The example blog; its stylesheet is served by the static mount, without entering Python.
serve: build
	$(VENV)/bin/tines serve examples/blog/app.py:app --hooks examples/blog/tines_hooks.py \
		--static /static=examples/blog/static --bind $(HOST):$(PORT)

# The ASGI example beside the blog: a Starlette chat room over WebSocket (one worker: the room
# lives in the worker), on http://$(HOST):8001.
chat: build
	$(VENV)/bin/tines serve examples/chat/app.py:app --workers 1 --bind $(HOST):8001

test: build typecheck test-rust test-python

typecheck: build
	$(VENV)/bin/mypy --strict python/tines
	# benches/attack.py imports the slow-client harness from tests/python (shared with the e2e test).
	cd benches && MYPYPATH=../tests/python ../$(VENV)/bin/mypy --strict *.py apps/techempower.py apps/flask_upload.py apps/flask_ok.py

test-rust:
	cargo test --workspace --release --quiet

# The wheel first: tests/python/e2e/test_wheel.py installs it into a fresh virtualenv.
test-python: build wheel
	$(PY) -m pytest -q

docs: build
	$(PY) tools/gen_settings_doc.py

# The side-by-side suite (docs/benchmarks.md): 5 interleaved runs per cell, about 33 minutes of
# both cores; it installs wrk, nginx, libev-dev and the peers (bjoern among them) itself. Then
# tines tune's right-answer runs (bench-tune, about 6 minutes) and process per request against
# the fork limit (bench-isolation, about 6 minutes), the TLS rows (bench-tls, about 30
# minutes), the HTTP/2 rows (bench-h2, about 15 minutes) and issue 39's static, compression
# and rate-limit rows (bench-edge, about 15 minutes): about 105 minutes in all.
# BENCH_QUICK=1 for a 5-minute development run of the suite.
bench: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	$(PY) benches/run.py
	$(PY) benches/tune_check.py
	$(PY) benches/isolation.py $(ISOLATION_ARGS)
	$(PY) benches/tls.py --instructions $(TLS_ARGS)
	$(PY) benches/http2.py --instructions $(H2_ARGS)
	$(PY) benches/edge.py --instructions $(EDGE_ARGS)

# Issue 39: what people put nginx in front for, one server process pinned, 5 paired rounds per
# cell: a 4 KiB and a 1 MiB static file (Tines' --static mount against nginx sendfile), the
# blog page gzipped by Tines against nginx `gzip on` in front of Tines and against
# uncompressed (CPU and bytes), hello keep-alive with the rate limiter on (never reached)
# against off; then callgrind instructions per request for the marks' rows: about 15 minutes;
# the report goes to benches/results/edge-*.md. EDGE_ARGS for more flags (benches/edge.py
# --help), e.g. EDGE_ARGS="--out 2026-11-28-issue39-edge --cells static-4k,hello-rate-limit".
bench-edge: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	$(PY) benches/edge.py --instructions $(EDGE_ARGS)

# Issue 38: hello over HTTP/2, one worker pinned: Tines (event) over h2c with 10 streams per
# connection and over h2 (TLS), against Granian (h2c, h2), Hypercorn (h2c), gunicorn (h2c) and
# nginx (h2, static OK), and Tines' own HTTP/1.1 keep-alive; 5 rounds, server CPU per request,
# then callgrind instructions per request: about 15 minutes; the report goes to
# benches/results/http2-*.md. H2_ARGS for more flags (benches/http2.py --help), e.g.
# H2_ARGS="--out 2026-11-27-issue38-h2 --servers tines-event-h2c,tines-event-h1,granian-h2c".
bench-h2: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	$(PY) benches/http2.py --instructions $(H2_ARGS)

# Issue 37: Tines prefork and event over TLS against nginx (TLS, static OK), Granian and uvicorn,
# one ECDSA P-256 leaf + intermediate made by openssl; keep-alive CPU per request, a full and a
# resumed handshake per connection, 10,000 idle TLS connections' PSS; 5 rounds, then callgrind
# instruction counts (the judge within 15% of a mark): about 30 minutes; the report goes to
# benches/results/tls-*.md. TLS_ARGS for more flags (benches/tls.py --help), e.g.
# TLS_ARGS="--out 2026-11-27-issue37-tls --servers tines-prefork-tls,nginx-tls".
bench-tls: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	$(PY) benches/tls.py --instructions $(TLS_ARGS)

# Issue 36: process per request (prefork --max-requests 1 --preload) beside prefork reuse, the
# fork limit and a minimal fork-per-connection server, hello and the blog, Connection: close, 1
# and 50 connections, 5 rounds, then the per-request breakdown (perf): about 6 minutes; the
# report goes to benches/results/isolation-*.md. ISOLATION_ARGS for more flags, e.g.
# ISOLATION_ARGS="--per-request-flags='--max-requests 1 --preload --spare-workers 2'"
# (benches/isolation.py --help).
bench-isolation: build
	$(PY) benches/isolation.py $(ISOLATION_ARGS)

# tines tune on the apps of benches/apps/tune/, whose right answers are known (about 6 minutes);
# exit status 1 when a recommendation is wrong. TUNE_ARGS for more flags (--record, --budget).
bench-tune: build
	$(PY) benches/tune_check.py $(TUNE_ARGS)

# The whole matrix (hours) in the background, resumable: run it again to go on where it
# stopped; progress in benches/results/tmp/full/run.log.
bench-full: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	mkdir -p benches/results/tmp/full
	nohup $(PY) benches/run.py --full >>benches/results/tmp/full/run.log 2>&1 </dev/null &
	@echo "bench-full: running in the background; follow benches/results/tmp/full/run.log"

# Before/after: the baseline BASE (a git revision; default: the merge-base of HEAD and
# BASE_BRANCH, main) against this tree, tines prefork on hello and blog, keep-alive and close,
# 5 interleaved 5 s runs per side: about 6 minutes, plus the baseline's first build (cached per
# commit in benches/results/tmp/ab/). AB_ARGS for more flags (benches/ab.py --help).
BASE_BRANCH ?= main
bench-ab: build
	cargo build --release --quiet -p tines-loadgen --bin tines-bench
	$(PY) benches/ab.py $(if $(BASE),--base $(BASE)) --base-branch $(BASE_BRANCH) $(AB_ARGS)

# tines-bench against wrk, both loading nginx's static "OK" (installs nginx and wrk if missing);
# about 70 s. Exit status 1 when tines-bench misses wrk's rate, CPU or memory marks.
bench-tool: build
	$(PY) benches/loadgen_vs_wrk.py

# What a client under load sees across each deploy operation (HUP, HUP with a broken app, USR2,
# USR2 with a broken app, TERM) on every MPM, keep-alive and close: about 5 minutes; the table
# goes to benches/results/deploy-*.md. DEPLOY_ARGS for more flags (benches/deploy.py --help).
bench-deploy: build
	$(PY) benches/deploy.py $(DEPLOY_ARGS)

# Each fuzz target for FUZZ_SECONDS (default 60) on nightly; the corpora are replayed by
# `make test` on stable (crates/proto/tests/fuzz_corpus.rs).
fuzz:
	fuzz/run.sh

fmt:
	cargo fmt --all

lint: build
	cargo clippy --workspace --all-targets -- -D warnings

clean:
	rm -rf $(VENV) target dist
