"""The report in a real browser: headless Chromium runs its JS without errors and the viewer renders."""

from __future__ import annotations

import html
import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.report.rundir import INJECTION
from trace_train.report import build_report

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium "
                       "(Debian: apt-get install -y chromium)"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--virtual-time-budget=5000"]


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)


def test_report_renders_in_chromium(run_dir: Path, tmp_path: Path):
    page = build_report(run_dir)
    base = page.resolve().as_uri()
    episode = f"{'trace/retail-sim-v0'}|1000000|base|1000000"
    url = base + "?" + urllib.parse.urlencode({"source": "eval: base", "episode": episode})

    proc = chromium(url, tmp_path / "profile", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-ready="1"' in root, "the viewer script did not finish"
    assert 'data-errors="0"' in root, f"JS errors on the page: {root}"
    assert "data-pwned" not in root, "trajectory content was executed as HTML"
    # The deep-linked trajectory is shown, with its messages, tool calls and collapsible tool responses.
    detail = re.search(r'<div id="traj-detail"[^>]*data-episode="([^"]+)"[^>]*>(.*?)</div></div></div>', dom, re.S)
    assert detail, "the viewer shows no trajectory"
    assert html.unescape(detail.group(1)) == episode
    body = detail.group(2)
    assert 'class="msg user"' in body and 'class="msg assistant"' in body
    assert "→ get_order_details(" in body and "<summary>tool response" in body
    assert html.escape(INJECTION, quote=False) in body  # hostile text rendered as text
    assert len(re.findall(r'<li[ >]', dom)) >= 12  # the list of eval: base trajectories

    shot = tmp_path / "report.png"
    proc = chromium(base, tmp_path / "profile2", "--window-size=1400,2400", f"--screenshot={shot}",
                    "--hide-scrollbars")
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
