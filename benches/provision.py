"""What the benchmark needs on the machine, and the facts recorded next to its results.

Owns installing the system tools (``wrk`` and ``nginx`` with apt-get), the Debian
development packages the peers compile against (``libev-dev`` for bjoern), and the peers' venv
``benches/.venv-peers`` (gunicorn, Granian, uWSGI, bjoern, and the Flask apps' packages pinned to
the dev venv's versions, so every server runs the same app code), and collecting machine
information and versions. Every install step is idempotent: a second run installs nothing.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEERS_VENV = REPO / "benches" / ".venv-peers"
# Packages the blog needs in the peers' venv, pinned to the dev venv's versions.
BLOG_PACKAGES = ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker")
# The peers, newest release of each (their versions go into every report). uWSGI and bjoern are
# built from source by pip (they need a C compiler and the Python headers; bjoern also libev's).
PEER_PACKAGES = ("gunicorn", "granian", "uwsgi", "bjoern", "uvicorn", "uvloop", "httptools")
# Debian package providing each system tool.
APT_PACKAGES = {"wrk": "wrk", "nginx": "nginx-light"}
# Debian development packages a peer compiles against, each with the header that shows it is
# installed (checked before asking dpkg): bjoern's C extension links libev.
DEV_PACKAGES = {"bjoern": {"libev-dev": Path("/usr/include/ev.h")}}
NGINX = "/usr/sbin/nginx"


def run_quiet(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, capturing its output as text; never raises for a non-zero exit."""
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def tool_path(name: str) -> str | None:
    """Where the system tool ``name`` is installed, or None."""
    if name == "nginx":
        return NGINX if Path(NGINX).exists() else shutil.which("nginx")
    return shutil.which(name)


def ensure_tools(names: list[str]) -> None:
    """apt-get install the missing tools among ``names`` (``apt-get update`` only on failure)."""
    missing = [APT_PACKAGES[n] for n in names if tool_path(n) is None]
    if not missing:
        return
    apt_install(missing)
    if "nginx-light" in missing:
        # Debian starts the packaged service on install; the benchmark runs its own nginx.
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        run_quiet(sudo + ["service", "nginx", "stop"])


def dev_package_installed(package: str, header: Path) -> bool:
    """Whether the Debian development package is there: its header, else ``dpkg -s``."""
    if header.exists():
        return True
    try:
        status = run_quiet(["dpkg-query", "-W", "-f=${Status}", package])
    except OSError:  # no dpkg: not a Debian system, apt_install says so
        return False
    return status.returncode == 0 and status.stdout.strip() == "install ok installed"


def ensure_dev_packages(peers: list[str]) -> None:
    """apt-get install the development packages the ``peers`` compile against, if missing."""
    missing = [package for peer in peers for package, header in DEV_PACKAGES.get(peer, {}).items()
               if not dev_package_installed(package, header)]
    if missing:
        apt_install(missing)


def apt_install(missing: list[str]) -> None:
    """apt-get install ``missing`` (``apt-get update`` only on failure); exit if impossible."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    print(f"bench: installing {' '.join(missing)} (apt-get)", file=sys.stderr)
    install = sudo + ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if run_quiet(install, env=env).returncode != 0:
        run_quiet(sudo + ["apt-get", "update"], env=env)
        result = run_quiet(install, env=env)
        if result.returncode != 0:
            sys.exit(f"bench: cannot install {' '.join(missing)}: {result.stderr.strip()[-500:]}")


def blog_pins() -> list[str]:
    """``name==version`` for the blog's packages as installed in this (the dev) venv."""
    return pins_of(BLOG_PACKAGES)


def pins_of(names: tuple[str, ...]) -> list[str]:
    """``name==version`` for each of ``names`` installed in this (the dev) venv."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return pins


def peer_versions(packages: list[str]) -> dict[str, str]:
    """Installed versions of ``packages`` in the peers' venv (missing ones are left out)."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        return {}
    result = run_quiet([str(python), "-c", code, *packages])
    return json.loads(result.stdout) if result.returncode == 0 else {}


def ensure_peers(packages: tuple[str, ...] = PEER_PACKAGES) -> None:
    """Create ``benches/.venv-peers`` with the peers (``packages``: all of PEER_PACKAGES unless
    a suite needs fewer, as the TLS rows) and the blog's pinned packages (first the Debian
    development packages that a missing peer compiles against)."""
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        print(f"bench: creating {PEERS_VENV.relative_to(REPO)}", file=sys.stderr)
        # From inside a venv, ``-m venv`` builds on the base interpreter: the same Python.
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    pins = blog_pins()
    wanted = {p.split("==")[0]: p.split("==")[1] for p in pins}
    have = peer_versions([*packages, *wanted])
    missing = [n for n in packages if n not in have]
    missing += [f"{n}=={v}" for n, v in wanted.items() if have.get(n) != v]
    if missing:
        ensure_dev_packages(missing)
        print(f"bench: installing into the peers' venv: {' '.join(missing)}"
              + (" (uwsgi compiles, about a minute)" if "uwsgi" in missing else ""),
              file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *missing], check=True)


def first_line(cmd: list[str]) -> str:
    """First line of what ``cmd`` prints (stdout, else stderr), or "unknown"."""
    try:
        result = run_quiet(cmd, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (result.stdout or result.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def machine_info() -> dict[str, Any]:
    """CPU count and model, kernel, memory, and the load average when the benchmark starts."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = "unknown"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {"nproc": os.cpu_count(), "cpu_model": model, "memory": memory,
            "kernel": platform.release(),
            "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def versions(tines: Path) -> dict[str, str]:
    """Versions of everything measured; ``tines`` is the tines executable."""
    commit = first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = run_quiet(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]
                      ).stdout.strip()
    peers = peer_versions([*PEER_PACKAGES, "flask"])
    nginx = tool_path("nginx")
    return {
        "python": platform.python_version(),
        "tines": f"{first_line([str(tines), '--version'])} "
                 f"(git {commit}{'+dirty' if dirty else ''})",
        **{name: peers.get(name, "missing") for name in (*PEER_PACKAGES, "flask")},
        "nginx": first_line([nginx, "-v"]) if nginx else "missing",
        "wrk": first_line(["wrk", "-v"]) if tool_path("wrk") else "missing",
    }
