"""Headless Chromium for tests: the DOM after scripts ran, a screenshot, and what they hold.

The argv is the one verified on this machine (Debian `chromium`): new headless mode, no
sandbox (tests run as root), no network (`--host-resolver-rules`, and a network namespace
of its own when `unshare -n` works), a fresh profile each time. Chromium exits 0 even when
the page's scripts threw, so callers assert on what the page holds, never on the exit code.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

BINARIES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=10000",
    "--enable-logging=stderr",
    "--v=0",
]


class ChromiumUnavailable(Exception):
    """No Chromium here, or it cannot start."""


def binary() -> str:
    for name in BINARIES:
        found = (
            shutil.which(name) if "/" not in name else (name if os.access(name, os.X_OK) else None)
        )
        if found:
            return found
    raise ChromiumUnavailable("no chromium binary (apt-get install -y chromium)")


def _prefix() -> list[str]:
    """`unshare -n` when this process may make a network namespace: no traffic at all."""
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0:
        probe = subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=10)
        if probe.returncode == 0:
            return [unshare, "-n"]
    return []


def run(
    page: Path, *mode: str, size: tuple[int, int] = (1000, 1800)
) -> subprocess.CompletedProcess[bytes]:
    """Chromium on `page` (a file) with `mode` (`--dump-dom` or `--screenshot=PATH`)."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        argv = [
            *_prefix(),
            binary(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={size[0]},{size[1]}",
            *mode,
            page.resolve().as_uri(),
        ]
        try:
            return subprocess.run(argv, capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ChromiumUnavailable(f"chromium did not run: {exc}") from None
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(page: Path) -> tuple[str, str]:
    """The serialized DOM after the page's scripts ran, and Chromium's stderr."""
    proc = run(page, "--dump-dom")
    dom = proc.stdout.decode("utf-8", "replace")
    if "<html" not in dom:
        raise ChromiumUnavailable(f"chromium gave no DOM: {proc.stderr.decode()[-2000:]}")
    return dom, proc.stderr.decode("utf-8", "replace")


def screenshot(page: Path, png: Path, size: tuple[int, int] = (1000, 1800)) -> Path:
    proc = run(page, f"--screenshot={png}", size=size)
    if not png.exists():
        raise ChromiumUnavailable(f"chromium wrote no screenshot: {proc.stderr.decode()[-2000:]}")
    return png


def page_console_errors(stderr: str, page: Path) -> list[str]:
    """Console messages of the page itself (Chromium's own pages log noise too)."""
    uri = page.resolve().as_uri()
    return [
        line
        for line in stderr.splitlines()
        if ":CONSOLE:" in line and uri in line and "frame-ancestors" not in line
    ]


# -- counting what plotly drew ------------------------------------------------------------------

ZERO_BAR = re.compile(r"^M[\d.]+,([\d.]+)V\1H[\d.]+V\1Z$")  # a plotly bar of zero height


class MarkCounter(HTMLParser):
    """Counts plotly's drawn marks per chart (the `div` id given to `to_html`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, set[str], str | None]] = []
        self.hits: dict[tuple[str | None, str], int] = {}
        self.tags: dict[str, int] = {}

    def _add(self, key: tuple[str | None, str]) -> None:
        self.hits[key] = self.hits.get(key, 0) + 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.stack.append((tag, classes, a.get("id")))
        if tag != "path":
            return
        ancestors = [c for _, c, _ in self.stack[:-1]]
        if any("legend" in c for c in ancestors):
            return  # the legend's swatches are not marks
        ids = [i for *_, i in self.stack if i]
        scope = ids[-1] if ids else None
        if any("point" in c for c in ancestors) and any({"trace", "bars"} <= c for c in ancestors):
            if not ZERO_BAR.match(a.get("d") or ""):
                self._add((scope, "bar"))
        if "point" in classes and any({"trace", "scatter"} <= c for c in ancestors):
            self._add((scope, "point"))
        if "js-line" in classes:
            self._add((scope, "line"))
        if "js-fill" in classes and (a.get("d") or "").strip():
            self._add((scope, "fill"))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)


def count_marks(dom: str) -> MarkCounter:
    counter = MarkCounter()
    counter.feed(dom)
    return counter


# -- what a screenshot holds ----------------------------------------------------------------------


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB or RGBA PNG (non-interlaced), unfiltered."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            corner = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    if bpp == 4:
        rows = [bytes(b for i, b in enumerate(r) if i % 4 != 3) for r in rows]
    return width, height, rows


def colour_summary(path: Path) -> tuple[int, float]:
    """Distinct colours, and the share of pixels that are not white, of a screenshot."""
    width, height, rows = png_pixels(path)
    colours: set[bytes] = set()
    painted = 0
    for row in rows:
        for x in range(0, len(row), 3):
            pixel = row[x : x + 3]
            colours.add(pixel)
            if pixel != b"\xff\xff\xff":
                painted += 1
    return len(colours), painted / (width * height)
