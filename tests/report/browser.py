"""Open a report in headless Chromium over the DevTools protocol (--remote-debugging-pipe: JSON messages ended
by NUL on fds 3 and 4, no websocket library needed) and say what happened: every request the page made,
console errors and uncaught exceptions, how many Plotly plots drew, and a full-page screenshot.

    python -m tests.report.browser REPORT.html [OUT.png]    (exit 1 when the page fetched or broke anything)

Protocol: https://chromedevtools.github.io/devtools-protocol/ (Target.attachToTarget flatten, Network,
Runtime, Log, Page.captureScreenshot captureBeyondViewport).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kfchaos.report.selfcontained import with_policy

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--window-size=1280,900",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    """The browser a test needs. Missing: skip with the reason, or fail under CI=true, where `make test` has
    installed Debian's chromium (scripts/ensure-chromium.sh), as Prometheus and MariaDB."""
    found = chromium()
    if found:
        return found
    message = "headless Chromium not installed; `make chromium` installs Debian's (scripts/ensure-chromium.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class PageReport:
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, its own included
    checked: Any = None  # what check_js gave
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, error log entries
    plots: int = 0  # Plotly plots that drew (a .main-svg inside each .js-plotly-plot)
    height: int = 0
    screenshot: bytes = b""

    def outside_requests(self, page_url: str) -> list[str]:
        return [u for u in self.requests if u != page_url and not u.startswith(("data:", "blob:", "about:"))]


class _Pipe:
    def __init__(self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.process, self.out, self.inp = process, to_browser, from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout:g}s")
            self.events.append(self._read())

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed


PLOTS_DRAWN = "[...document.querySelectorAll('.js-plotly-plot')].filter(d => d.querySelector('.main-svg')).length"
PLOTS_WANTED = "document.querySelectorAll('.plotly-graph-div').length"

# The KFP UI shows an HTML artifact in <iframe sandbox='allow-scripts'> with srcdoc set to the file's content
# (kubeflow/pipelines frontend/src/components/viewers/HTMLViewer.tsx): no same origin, no storage.
# The report inside tells the host page, by postMessage, how many plots it drew.
_PROBE = f"<script>addEventListener('load',()=>setTimeout(()=>parent.postMessage({PLOTS_DRAWN},'*'),300))</script>"
_HOST = """<!doctype html><meta charset='utf-8'><title>waiting</title>
<iframe id='viewer' sandbox='allow-scripts' src='javascript:void(0);' style='width:1200px;height:2400px'></iframe>
<script>
addEventListener('message', event => { document.title = 'plots:' + event.data; });
document.getElementById('viewer').srcdoc = CONTENT;
</script>"""
VIEWER_DRAWN = "document.title.startsWith('plots:') ? Number(document.title.slice(6)) : 0"


def kfp_viewer_page(report: Path, folder: Path) -> Path:
    """A page that shows `report` the way the KFP UI's HTML viewer does; returns its path in `folder`."""
    # The probe is one more inline script: the page's policy (kfchaos.report.selfcontained.with_policy) is made again
    # with it, as the report would make it, so the viewer draws the report under its own Content-Security-Policy.
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", report.read_text(), count=1)
    content = with_policy(page.replace("</body>", _PROBE + "</body>", 1))
    host = folder / "kfp-viewer.html"
    host.write_text(_HOST.replace("CONTENT", json.dumps(content).replace("</", "<\\/")))
    return host


def open_page(
    report: Path,
    *,
    timeout: float = 60.0,
    width: int = 1280,
    drawn_js: str = PLOTS_DRAWN,
    wanted_js: str = PLOTS_WANTED,
    check_js: str | None = None,
) -> PageReport:
    """Load `report` (file://) and collect what it did; raises FileNotFoundError when there is no chromium."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("chromium not found (Debian: apt-get install chromium)")
    url = report.resolve().as_uri()
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    profile = tempfile.mkdtemp(prefix="kfchaos-chromium-")
    # Chromium reads commands from fd 3 and writes replies and events to fd 4. The pipe ends are first copied
    # above 100 so that placing them on 3 and 4 in the child cannot overwrite one with the other.
    high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 100)
    high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 100)

    def place_fds() -> None:
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    process = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(3, 4, high_r, high_w),
        preexec_fn=place_fds,
    )
    for fd in (to_browser_r, from_browser_w, high_r, high_w):
        os.close(fd)
    pipe = _Pipe(process, to_browser_w, from_browser_r)
    result = PageReport()
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)  # fmt: skip
        pipe.send("Page.navigate", {"url": url}, session)
        pipe.wait_for("Page.loadEventFired", timeout)
        # Plotly draws on load; give it until every plot has its SVG (bounded: the page may be broken).
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            drawn = pipe.send("Runtime.evaluate", {"expression": drawn_js, "returnByValue": True}, session)
            wanted = pipe.send("Runtime.evaluate", {"expression": wanted_js, "returnByValue": True}, session)
            result.plots = int(drawn["result"].get("value", 0))
            if result.plots >= int(wanted["result"].get("value", 0)):
                break
            time.sleep(0.2)
        if check_js is not None:  # evaluated once the plots are drawn (or the wait is over)
            checked = pipe.send("Runtime.evaluate", {"expression": check_js, "returnByValue": True}, session)
            result.checked = checked["result"].get("value")
        metrics = pipe.send("Page.getLayoutMetrics", session=session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        result.height = int(size["height"])
        shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                         "clip": {"x": 0, "y": 0, "width": width, "height": result.height, "scale": 1}},
                         session)  # fmt: skip
        result.screenshot = base64.b64decode(shot["data"])
    finally:
        with contextlib.suppress(RuntimeError, OSError):
            pipe.send("Browser.close")
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(to_browser_w)
        os.close(from_browser_r)
        shutil.rmtree(profile, ignore_errors=True)
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            result.requests.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            result.errors.append(f"exception: {details.get('exception', {}).get('description') or details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in
                                                        params.get("args", [])))  # fmt: skip
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            result.errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
    return result


def main(argv: list[str]) -> int:
    report = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else report.with_suffix(".png")
    page = open_page(report)
    out.write_bytes(page.screenshot)
    outside = page.outside_requests(report.resolve().as_uri())
    print(f"{out}: {page.height}px tall, {page.plots} plot(s) drawn")
    for url in outside:
        print(f"request to the network: {url}", file=sys.stderr)
    for error in page.errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if outside or page.errors or not page.plots else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
