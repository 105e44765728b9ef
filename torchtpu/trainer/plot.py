"""A loss-curve PNG written with zlib alone (no plotting library needed).

loss_curve_png(path, steps, losses) draws the curve on white with axes, a few
grid lines, and the value range written in a small built-in bitmap font (digits
and the few letters the labels use). The PNG is 8-bit RGB, written atomically.
"""
import math
import os
import struct
import zlib

# 3x5 glyphs, rows top to bottom, 3 bits each (bit 2 = left column).
_FONT = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 2, 2),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), ".": (0, 0, 0, 0, 2), "-": (0, 0, 7, 0, 0),
    "e": (0, 7, 7, 4, 7), " ": (0, 0, 0, 0, 0), ":": (0, 2, 0, 2, 0),
    "s": (0, 3, 6, 1, 6), "t": (2, 7, 2, 2, 3), "p": (0, 7, 5, 7, 4), "l": (6, 2, 2, 2, 7),
    "o": (0, 7, 5, 5, 7), "=": (0, 7, 0, 7, 0),
}

WHITE, BLACK, GREY, BLUE = (255, 255, 255), (0, 0, 0), (220, 220, 220), (31, 90, 200)


class _Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def set(self, x, y, rgb):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(rgb)

    def line(self, x0, y0, x1, y1, rgb, width=1):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            x = round(x0 + (x1 - x0) * i / n)
            y = round(y0 + (y1 - y0) * i / n)
            for dx in range(width):
                for dy in range(width):
                    self.set(x + dx, y + dy, rgb)

    def text(self, x, y, s, rgb=BLACK, scale=2):
        for ch in s:
            rows = _FONT.get(ch, _FONT[" "])
            for r, bits in enumerate(rows):
                for c in range(3):
                    if bits >> (2 - c) & 1:
                        for dx in range(scale):
                            for dy in range(scale):
                                self.set(x + c * scale + dx, y + r * scale + dy, rgb)
            x += 4 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w])
                       for y in range(self.h))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _fmt(v):
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


def loss_curve_png(path, steps, losses, width=640, height=400):
    """Writes the curve losses(steps) to `path` (atomically)."""
    pts = [(s, l) for s, l in zip(steps, losses) if math.isfinite(l)]
    cv = _Canvas(width, height)
    left, right, top, bottom = 70, width - 20, 20, height - 40
    if pts:
        s0, s1 = pts[0][0], max(pts[-1][0], pts[0][0] + 1)
        lo, hi = min(l for _, l in pts), max(l for _, l in pts)
        if hi - lo < 1e-12:
            hi = lo + 1.0
        for k in range(5):  # grid and y labels
            y = round(top + (bottom - top) * k / 4)
            cv.line(left, y, right, y, GREY)
            cv.text(4, y - 5, _fmt(hi - (hi - lo) * k / 4))
        for k in range(5):  # x labels
            x = round(left + (right - left) * k / 4)
            cv.line(x, top, x, bottom, GREY)
            cv.text(x - 12, bottom + 8, str(round(s0 + (s1 - s0) * k / 4)))

        def xy(s, l):
            return (round(left + (right - left) * (s - s0) / (s1 - s0)),
                    round(bottom - (bottom - top) * (l - lo) / (hi - lo)))

        prev = xy(*pts[0])
        for s, l in pts[1:]:
            cur = xy(s, l)
            cv.line(prev[0], prev[1], cur[0], cur[1], BLUE, width=2)
            prev = cur
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    cv.text(right - 80, height - 16, "step")
    cv.text(4, height - 16, "loss")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(cv.png())
    os.replace(tmp, path)
    return path
