"""Line charts written as PNG with the standard library alone (no matplotlib,
no numpy): an RGB canvas, a 5x7 bitmap font, and a PNG encoder (zlib).

Used by scripts/results for docs/results/*.png. The output is a pure
function of the input, so a test can compare a chart's pixels with a file's
(`png_pixels`, which reads back what `Canvas.png` writes).

    c = Canvas(720, 400)
    line_chart(c, (0, 0, 720, 400), [("a", [(1, 2.0), (4, 3.0)])], title="...", log_x=True)
    open("out.png", "wb").write(c.png())
"""
import math
import struct
import zlib

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GREY = (200, 200, 200)
DARK = (90, 90, 90)
# Distinct on white and for the common colour blindnesses (Okabe-Ito).
PALETTE = [(0, 114, 178), (213, 94, 0), (0, 158, 115), (204, 121, 167), (230, 159, 0),
           (86, 180, 233), (0, 0, 0), (240, 228, 66)]

# 5x7 glyphs, one string of 7 rows of 5 bits each; lower case is drawn as
# upper case, and a character not here as '?'.
_FONT = {
    " ": "00000 00000 00000 00000 00000 00000 00000",
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    ".": "00000 00000 00000 00000 00000 01100 01100", ",": "00000 00000 00000 00000 01100 00100 01000",
    "-": "00000 00000 00000 11111 00000 00000 00000", "+": "00000 00100 00100 11111 00100 00100 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010", ")": "01000 00100 00010 00010 00010 00100 01000",
    "[": "01110 01000 01000 01000 01000 01000 01110", "]": "01110 00010 00010 00010 00010 00010 01110",
    "/": "00000 00001 00010 00100 01000 10000 00000", ":": "00000 01100 01100 00000 01100 01100 00000",
    "%": "11000 11001 00010 00100 01000 10011 00011", "=": "00000 00000 11111 00000 11111 00000 00000",
    "_": "00000 00000 00000 00000 00000 00000 11111", "'": "01100 00100 01000 00000 00000 00000 00000",
    "*": "00000 00100 10101 01110 10101 00100 00000", "?": "01110 10001 00001 00010 00100 00000 00100",
}
_SAME = {"×": "X", "–": "-", "—": "-", "·": "."}


class Canvas:
    """An RGB image; (0, 0) is the top left pixel."""

    def __init__(self, width, height, background=WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i:i + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        """Fills [x0, x1] x [y0, y1]."""
        for y in range(max(0, y0), min(self.height - 1, y1) + 1):
            for x in range(max(0, x0), min(self.width - 1, x1) + 1):
                self.set(x, y, color)

    def line(self, x0, y0, x1, y1, color, width=1):
        """Bresenham, thickened to a square pen of `width` pixels."""
        x0, y0, x1, y1 = round(x0), round(y0), round(x1), round(y1)
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, lo = dx + dy, -(width // 2)
        while True:
            for oy in range(lo, lo + width):
                for ox in range(lo, lo + width):
                    self.set(x0 + ox, y0 + oy, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, color=BLACK, scale=2):
        """Draws `s` with its top left corner at (x, y); returns the width."""
        for k, ch in enumerate(s):
            rows = _FONT.get(_SAME.get(ch, ch.upper()), _FONT["?"]).split()
            for r, bits in enumerate(rows):
                for c, bit in enumerate(bits):
                    if bit == "1":
                        px, py = x + (6 * k + c) * scale, y + r * scale
                        self.rect(px, py, px + scale - 1, py + scale - 1, color)
        return text_width(s, scale)

    def png(self):
        """The image as PNG bytes (8-bit RGB, no filter, zlib level 9)."""
        return _chunks(self.width, self.height, zlib.compress(self.raw(), 9))

    def raw(self):
        """The scanlines as a PNG stores them before compression."""
        stride = 3 * self.width
        return b"".join(b"\x00" + bytes(self.pixels[y * stride:(y + 1) * stride]) for y in range(self.height))


def text_width(s, scale=2):
    return max(0, 6 * len(s) - 1) * scale


def _chunks(width, height, idat):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def png_pixels(data):
    """(width, height, scanlines) of a PNG written by Canvas.png(), to compare
    images by content whatever zlib's version compressed them."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return width, height, zlib.decompress(idat)


def nice_ticks(lo, hi, count=5):
    """Round tick values spanning [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def _label(v):
    return f"{v:g}"


def line_chart(canvas, box, series, title="", x_label="", y_label="", log_x=False, x_ticks=None, colors=None,
               legend=True):
    """Draws series = [(name, [(x, y), ...]), ...] as lines with square
    markers inside box = (left, top, right, bottom), with axes, ticks and a
    grid; legend: a legend right of the plot area (else draw one with
    `legend_rows`). log_x: x on a log scale; x_ticks: the x values to label
    (default: every x of the data); colors: {name: (r, g, b)} (default: the
    palette in series order)."""
    left, top, right, bottom = box
    colors = colors or {name: PALETTE[k % len(PALETTE)] for k, (name, _) in enumerate(series)}
    points = [p for _, pts in series for p in pts]
    xs = sorted({x for x, _ in points})
    ys = [y for _, y in points]
    yt = nice_ticks(min(ys), max(ys))
    y0, y1 = yt[0], yt[-1]
    fx = (lambda v: math.log(v)) if log_x else (lambda v: v)
    x0, x1 = fx(xs[0]), fx(xs[-1])
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    label_w = max(text_width(_label(t)) for t in yt)
    legend_w = max(text_width(name) for name, _ in series) + 52 if legend else 0
    pl, pr = left + 30 + label_w, right - 14 - legend_w
    pt, pb = top + 54, bottom - 52
    pad = 0.04 * (x1 - x0)

    def px(v):
        return pl + (fx(v) - x0 + pad) / (x1 - x0 + 2 * pad) * (pr - pl)

    def py(v):
        return pb - (v - y0) / (y1 - y0) * (pb - pt)

    canvas.text(left + 8, top + 8, title)
    canvas.text(left + 8, top + 32, y_label, DARK)
    for t in yt:
        y = round(py(t))
        canvas.line(pl, y, pr, y, GREY)
        s = _label(t)
        canvas.text(pl - 8 - text_width(s), y - 7, s, DARK)
    for t in x_ticks or xs:
        x = round(px(t))
        canvas.line(x, pb, x, pb + 5, DARK)
        s = _label(t)
        canvas.text(x - text_width(s) // 2, pb + 10, s, DARK)
    canvas.line(pl, pt, pl, pb, BLACK)
    canvas.line(pl, pb, pr, pb, BLACK)
    canvas.text((pl + pr - text_width(x_label)) // 2, pb + 32, x_label, DARK)
    for k, (name, pts) in enumerate(series):
        color = colors[name]
        pts = sorted(pts)
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            canvas.line(px(xa), py(ya), px(xb), py(yb), color, width=2)
        for x, y in pts:
            cx, cy = round(px(x)), round(py(y))
            canvas.rect(cx - 3, cy - 3, cx + 3, cy + 3, color)
        if legend:
            _legend_entry(canvas, pr + 16, pt + 20 * k, name, color)


def _legend_entry(canvas, x, y, name, color):
    canvas.rect(x, y + 5, x + 22, y + 8, color)
    canvas.text(x + 30, y, name, BLACK)
    return 30 + text_width(name) + 24


def legend_rows(names, width):
    """How many rows a legend of `names` takes across `width` pixels."""
    rows, x = 1, 0
    for name in names:
        w = 30 + text_width(name) + 24
        if x and x + w > width:
            rows, x = rows + 1, 0
        x += w
    return rows


def draw_legend(canvas, left, top, width, names, colors):
    """A legend flowing left to right, wrapped at `width`, 22 pixels a row."""
    x, y = 0, top
    for name in names:
        w = 30 + text_width(name) + 24
        if x and x + w > width:
            x, y = 0, y + 22
        x += _legend_entry(canvas, left + 16 + x, y, name, colors[name])
