"""A small Chrome DevTools protocol client over a pipe, for the report's browser tests (no extra package).

Chromium started with `--remote-debugging-pipe` reads protocol commands (JSON, each ended by a NUL byte) from
its file descriptor 3 and writes responses and events to its descriptor 4; `Browser` runs Debian's headless
chromium that way, opens one page, and records what the page logs (console errors, uncaught exceptions,
log entries) and every network request it makes, so a test can assert there were none.

    with Browser() as b:
        b.open(path)                      # waits for the load event
        b.evaluate("document.title")
        b.hover(".cell")                  # a real mouse event at the element's centre
        b.errors, b.requests              # what the page logged and requested
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """The browser did not answer, or answered a command with an error."""


class Browser:
    """Headless chromium driven over the DevTools protocol; one page of `width` x `height` CSS pixels."""

    def __init__(
        self, width: int = 1280, height: int = 900, *, binary: str | None = CHROMIUM, timeout: float = 60
    ):
        if binary is None:
            raise BrowserError("no chromium binary is installed")
        self.width, self.height, self.timeout = width, height, timeout
        self.profile = tempfile.mkdtemp(prefix="mechmem-chromium-")
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()

        def descriptors() -> None:  # in the child: our pipe ends become its fds 3 (commands) and 4 (replies)
            read_end = fcntl.fcntl(to_browser, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=descriptors,  # noqa: PLW1509 - the tests start no threads that could deadlock it
            pass_fds=(3, 4),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    # -- the protocol
    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed the protocol pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result; events seen meanwhile are
        recorded."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._record(reply)

    def wait_for(self, method: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the page sends event `method` (or return it if it already came)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            event = self._read(deadline)
            if "method" in event:
                self._record(event)
                if event["method"] == method:
                    return event

    # -- pages
    def open(self, path: str | Path) -> float:
        """Load a file and wait for its load event; returns the load time in seconds (navigation start to the
        end of the load event, the page's own `PerformanceNavigationTiming`)."""
        self.events.clear()
        self.errors.clear()
        self.requests.clear()
        self.url = Path(path).resolve().as_uri()
        self.call("Page.navigate", {"url": self.url})
        self.wait_for("Page.loadEventFired")
        return self.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000.0

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (it must be JSON-able)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def centre(self, selector: str) -> tuple[float, float]:
        """Scroll the first element matching `selector` into view; its centre in viewport pixels."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center', inline: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"no element matches {selector!r}")
        return box[0], box[1]

    def hover(self, selector: str) -> None:
        """Move the mouse onto the element's centre (a real input event)."""
        x, y = self.centre(selector)
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def hover_at(self, selector: str, dx: float, dy: float) -> None:
        """Move the mouse to (dx, dy) CSS pixels from the element's top-left corner (after scrolling it into
        view)."""
        self.centre(selector)
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left, r.top]; })()"
        )
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0] + dx, "y": box[1] + dy})

    def click(self, selector: str) -> None:
        """Press and release the left button on the element's centre."""
        x, y = self.centre(selector)
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            )

    def screenshot(self, path: str | Path, *, full_page: bool = False) -> Path:
        """A PNG of the viewport (or, with `full_page`, of the whole page) at 1 device pixel per CSS pixel."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = self.evaluate("document.documentElement.scrollHeight")
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1},
            )
        data = self.call("Page.captureScreenshot", params)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def screenshot_element(self, selector: str, path: str | Path) -> Path:
        """A PNG of one element (scrolled into view) at 1 device pixel per CSS pixel."""
        self.centre(selector)
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()"
        )
        clip = {"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1}
        data = self.call(
            "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}
        )
        Path(path).write_bytes(base64.b64decode(data["data"]))
        return Path(path)

    def external_requests(self) -> list[str]:
        """Requests for anything but the page itself and `data:` URIs inside it."""
        return [u for u in self.requests if u != self.url and not u.startswith("data:")]

    # -- lifetime
    def close(self) -> None:
        try:
            self.call("Browser.close") if self.proc.poll() is None else None
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":  # noqa: PYI034 (beartype rejects Self on methods)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
