"""Headless Chromium for page tests: find it, screenshot a page, dump its DOM, read the PNG.

Debian's `chromium` package (installed by `.ci/run`); tests skip with the reason when none
is found. The PNG reader is enough for Chromium's screenshots (8-bit RGB or RGBA)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
)


def find() -> str | None:
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Rendered:
    screenshot: Path
    dom: str
    log: str  # Chromium's stderr from both runs

    def console_errors(self) -> list[str]:
        """Console messages of the page (errors, uncaught exceptions, failed loads)."""
        lines = []
        for line in self.log.splitlines():
            page = "CONSOLE" in line or "Uncaught" in line
            load = "net::ERR_" in line or "Failed to load resource" in line
            if page or load:
                lines.append(line)
        return lines


def render(browser: str, page: Path, workdir: Path, size: str = "1200,1400") -> Rendered:
    """Screenshot `page` into workdir/screenshot.png and dump its DOM, each in a fresh profile."""
    shot = workdir / "screenshot.png"
    url = page.resolve().as_uri()
    logs = []
    shot_run = subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={workdir / 'profile-1'}", f"--window-size={size}",
         f"--screenshot={shot}", url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    logs.append(shot_run.stderr)
    dom_run = subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={workdir / 'profile-2'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    logs.append(dom_run.stderr)
    (workdir / "chromium.log").write_text("\n".join(logs), encoding="utf-8")
    return Rendered(shot, dom_run.stdout, "\n".join(logs))


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """(width, height, pixels as RGB(A) tuples) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat = 8, b""
    width = height = channels = 0
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), f"unsupported PNG: depth {depth}, {colour}"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
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
        rows.append(line)
        previous = line
    pixels = [tuple(row[x * channels : x * channels + 3]) for row in rows for x in range(width)]
    return width, height, pixels
