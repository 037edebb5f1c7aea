"""A line chart as a PNG with the standard library only (zlib, struct):
the scale run's plot without a plotting library in the environment.

A canvas of RGB pixels, straight lines (Bresenham, drawn thick), filled
squares, and a 3x5 pixel font for the few characters axis labels need
(digits, '.', ',', 'x', ' '). Curves are numbered in the legend; the
README says what each number is."""

from __future__ import annotations

import math
import struct
import zlib
from typing import Sequence

RGB = tuple[int, int, int]

WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)
GREY: RGB = (200, 200, 200)
RED: RGB = (220, 30, 30)

PALETTE: tuple[RGB, ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
    (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (0, 0, 128), (128, 0, 0),
    (0, 128, 0), (255, 0, 255), (0, 150, 150), (120, 120, 0), (255, 180, 0), (90, 0, 160),
    (0, 200, 90), (160, 60, 0),
)

# 3 wide, 5 high; each row a string of '#' and '.'.
_GLYPHS: dict[str, tuple[str, ...]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"), "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"), "3": ("###", "..#", "###", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"), "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"), "7": ("###", "..#", "..#", "..#", "..#"),
    "8": ("###", "#.#", "###", "#.#", "###"), "9": ("###", "#.#", "###", "..#", "###"),
    ".": ("...", "...", "...", "...", ".#."), ",": ("...", "...", "...", ".#.", "#.."),
    "x": ("...", "#.#", ".#.", "#.#", "..."), " ": ("...", "...", "...", "...", "..."),
}


class Canvas:
    def __init__(self, width: int, height: int, background: RGB = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = [bytearray(bytes(background) * width) for _ in range(height)]

    def dot(self, x: int, y: int, colour: RGB) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.pixels[y][3 * x:3 * x + 3] = bytes(colour)

    def square(self, x: int, y: int, half: int, colour: RGB) -> None:
        for dy in range(-half, half + 1):
            for dx in range(-half, half + 1):
                self.dot(x + dx, y + dy, colour)

    def line(self, a: tuple[int, int], b: tuple[int, int], colour: RGB, *, thickness: int = 1,
             dash: int = 0) -> None:
        """Bresenham from a to b; `dash` > 0 draws `dash` pixels, skips as many."""
        (x0, y0), (x1, y1) = a, b
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error, step = dx + dy, 0
        while True:
            if not dash or (step // dash) % 2 == 0:
                self.square(x0, y0, thickness // 2, colour)
            if (x0, y0) == (x1, y1):
                return
            step += 1
            doubled = 2 * error
            if doubled >= dy:
                error += dy
                x0 += sx
            if doubled <= dx:
                error += dx
                y0 += sy

    def text(self, x: int, y: int, text: str, colour: RGB = BLACK, scale: int = 2) -> None:
        """`text` with its top-left corner at (x, y); characters without a glyph are skipped."""
        for index, character in enumerate(text):
            glyph = _GLYPHS.get(character)
            if glyph is None:
                continue
            for row, bits in enumerate(glyph):
                for column, bit in enumerate(bits):
                    if bit == "#":
                        for sy in range(scale):
                            for sx in range(scale):
                                self.dot(x + (index * 4 + column) * scale + sx, y + row * scale + sy, colour)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.pixels)  # filter type 0 on every row

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * 4 * scale - scale


def ratio_chart(series: Sequence[tuple[int, Sequence[tuple[float, float]]]], *, x_ticks: Sequence[float],
                threshold: float, width: int = 900, height: int = 560) -> bytes:
    """Numbered curves of (x, ratio) on a log-x axis, a dashed red line at
    `threshold`, the y axis from 0 to the larger of 2 and the highest point
    (a point above 4 is drawn at 4 and marked with a ring). The legend is
    each curve's number in its colour."""
    canvas = Canvas(width, height)
    left, right, top, bottom = 70, width - 150, 20, height - 50
    highest = max([2.0, *(min(y, 4.0) for _, points in series for _, y in points)])
    y_top = math.ceil(highest * 2) / 2
    low, high = math.log10(min(x_ticks)), math.log10(max(x_ticks))

    def at(x: float, y: float) -> tuple[int, int]:
        px = left + (math.log10(x) - low) / ((high - low) or 1) * (right - left)
        py = bottom - min(y, 4.0) / y_top * (bottom - top)
        return round(px), round(py)

    steps = int(y_top / 0.5)
    for i in range(steps + 1):
        y = i * 0.5
        _, py = at(min(x_ticks), y)
        canvas.line((left, py), (right, py), GREY)
        label = f"{y:.1f}x"
        canvas.text(left - 8 - text_width(label), py - 5, label)
    for x in x_ticks:
        px, _ = at(x, 0)
        canvas.line((px, top), (px, bottom), GREY)
        label = f"{int(x):,}"
        canvas.text(px - text_width(label) // 2, bottom + 10, label)
    canvas.line((left, bottom), (right, bottom), BLACK, thickness=2)
    canvas.line((left, top), (left, bottom), BLACK, thickness=2)
    _, threshold_y = at(min(x_ticks), threshold)
    canvas.line((left, threshold_y), (right, threshold_y), RED, thickness=2, dash=8)
    for index, (number, points) in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        pixels = [at(x, y) for x, y in points]
        for a, b in zip(pixels, pixels[1:]):
            canvas.line(a, b, colour, thickness=2)
        for (x, y), pixel in zip(points, pixels):
            canvas.square(*pixel, 3, colour)
            if y > 4.0:
                canvas.square(*pixel, 6, colour)
                canvas.square(*pixel, 4, WHITE)
                canvas.square(*pixel, 2, colour)
        row_y = top + index * 26
        canvas.square(right + 25, row_y + 5, 6, colour)
        canvas.text(right + 40, row_y, str(number), colour, scale=2)
    return canvas.png()
