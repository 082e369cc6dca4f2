"""Reading an agent's output: bytes in, complete lines out, memory bounded however long a line."""

from __future__ import annotations

MAX_LINE = 1 << 20  # longer lines are cut into pieces of this size
READ_CHUNK = 1 << 16  # bytes read from a pipe at a time


def _utf8_cut(buf: bytearray, limit: int) -> int:
    """An index <= limit that does not split a UTF-8 character."""
    cut = limit
    while cut > limit - 3 and cut > 0 and (buf[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


class LineSplitter:
    """Bytes in, complete lines out; a line longer than MAX_LINE comes out in pieces."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.open = True

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        lines: list[bytes] = []
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end < 0:
                break
            if end - start > MAX_LINE:
                lines.extend(self._pieces(self.buf[start:end]))
            else:
                lines.append(bytes(self.buf[start:end]))
            start = end + 1
        del self.buf[:start]
        while len(self.buf) > MAX_LINE:
            cut = _utf8_cut(self.buf, MAX_LINE)
            lines.append(bytes(self.buf[:cut]))
            del self.buf[:cut]
        return lines

    def finish(self) -> list[bytes]:
        rest, self.buf = bytes(self.buf), bytearray()
        return [rest] if rest else []

    @staticmethod
    def _pieces(line: bytearray) -> list[bytes]:
        pieces = []
        while len(line) > MAX_LINE:
            cut = _utf8_cut(line, MAX_LINE)
            pieces.append(bytes(line[:cut]))
            line = line[cut:]
        pieces.append(bytes(line))
        return pieces
