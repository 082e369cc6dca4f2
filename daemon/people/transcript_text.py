"""An attempt's `transcript.jsonl` as text a person reads: the agent's words, its tool calls
with their output folded, and loopd's own lines (process start and exit, stalls, nudges).

Every string is cleaned of terminal control sequences here (people/terminal.py); the caller
prints the lines as plain text (rich `Text`, never markup), so `[bold]` stays as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from daemon.people.terminal import clean

FOLD_LINES = 4  # lines of a tool's output shown before the rest is folded
ARGS_CHARS = 300  # characters of a tool call's arguments shown before they are cut
INDENT = "           "  # under the time column


@dataclass(frozen=True)
class Line:
    """One line to print, with a style name for a terminal (plain when piped)."""

    text: str
    style: str = ""


def _time(record: dict[str, Any]) -> str:
    ts = str(record.get("ts", ""))
    return ts[11:19] if len(ts) >= 19 else " " * 8


def _block(head: str, body: str, style: str = "") -> list[Line]:
    """`head` then `body`'s lines, the first next to the head and the rest indented."""
    lines = clean(body).split("\n") or [""]
    out = [Line(f"{head}{lines[0]}", style)]
    out += [Line(f"{INDENT}{line}", style) for line in lines[1:]]
    return out


def _args(arguments: Any, full: bool) -> str:
    if arguments is None or arguments == "":
        return ""
    if isinstance(arguments, str):
        text = arguments
    else:
        try:
            text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = str(arguments)
    text = " ".join(clean(text).split())
    if not full and len(text) > ARGS_CHARS:
        text = text[:ARGS_CHARS] + f"… ({len(text) - ARGS_CHARS} more characters)"
    return text


def _output(record: dict[str, Any], full: bool) -> list[Line]:
    output = clean(str(record.get("output", ""))).rstrip("\n")
    lines = output.split("\n") if output else []
    marks = []
    if record.get("denied"):
        marks.append("permission denied")
    elif record.get("is_error"):
        marks.append("failed")
    head = f"{INDENT}◀ {clean(str(record.get('tool', '') or 'result'))}: "
    head += f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
    head += f" ({', '.join(marks)})" if marks else ""
    style = "red" if marks else "dim"
    out = [Line(head, style)]
    shown = lines if full else lines[:FOLD_LINES]
    out += [Line(f"{INDENT}  │ {line}", "dim") for line in shown]
    if len(lines) > len(shown):
        more = len(lines) - len(shown)
        out.append(Line(f"{INDENT}  │ … {more} more line{'s' if more != 1 else ''} folded", "dim"))
    return out


def _loopd(record: dict[str, Any], when: str) -> list[Line]:
    kind = record.get("type")
    if kind == "process":
        event = record.get("event")
        if event == "started":
            argv = clean(str(record.get("argv", "")))
            return [Line(f"{when} ── agent started (pid {record.get('pid')}): {argv}", "cyan")]
        if event == "exited":
            code = record.get("exit_code")
            why = record.get("reason") or ""
            secs = record.get("seconds")
            text = f"{when} ── agent exited {code if code is not None else '-'}"
            text += f" after {secs}s" if secs is not None else ""
            text += f" ({clean(str(why))})" if why else ""
            return [Line(text, "cyan")]
        detail = record.get("reason") or record.get("error") or ""
        return [Line(f"{when} ── agent {event}: {clean(str(detail))}".rstrip(": "), "yellow")]
    if kind == "stall":
        detail = clean(str(record.get("detail", "")))
        return [Line(f"{when} !! stall ({record.get('kind', '?')}): {detail}", "yellow")]
    if kind == "nudge":
        return _block(
            f"{when} >> nudge {record.get('n', '')}: ", str(record.get("text", "")), "yellow"
        )
    if kind == "truncated":
        return [
            Line(
                f"{when} !! transcript cut at its cap ({record.get('cap_bytes')} bytes): "
                f"{record.get('dropped_lines')} lines of the agent's output were not kept",
                "red",
            )
        ]
    fields = {k: v for k, v in record.items() if k not in ("ts", "stream", "type")}
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    return [Line(f"{when} ── {clean(str(kind))} {clean(text)}".rstrip(), "cyan")]


def render_record(record: dict[str, Any], full: bool = False) -> list[Line]:
    """The lines for one transcript record."""
    when = _time(record)
    stream = record.get("stream")
    kind = record.get("type")
    if stream == "loopd":
        return _loopd(record, when)
    where = "stderr " if stream == "stderr" else ""
    if kind == "text":
        return _block(f"{when} {where}", str(record.get("text", "")))
    if kind == "raw":
        return _block(f"{when} {where}", str(record.get("text", "")), "dim")
    if kind == "tool_call":
        tool = clean(str(record.get("tool", "") or "tool"))
        return [Line(f"{when} ▶ {tool} {_args(record.get('arguments'), full)}".rstrip(), "bold")]
    if kind == "tool_result":
        return _output(record, full)
    if kind == "final":
        text = str(record.get("text", ""))
        head = f"{when} ■ ended with an error: " if record.get("is_error") else f"{when} ■ "
        return _block(head, text, "red" if record.get("is_error") else "green") if text else []
    if kind == "error":
        return _block(f"{when} !! error: ", str(record.get("text", "")), "red")
    if kind == "notice":
        return _block(f"{when} -- ", str(record.get("text", "")), "yellow")
    if kind == "session":
        return [Line(f"{when} ── session {clean(str(record.get('session_id', '')))}", "dim")]
    if kind == "prompt":  # what loopd asked, echoed by the agent: the prompt or the nudge
        if not full:
            return []
        return _block(f"{when} << asked: ", str(record.get("text", "")), "dim")
    if kind == "usage":
        if not full:
            return []
        tokens = f"{record.get('input_tokens', 0)} in, {record.get('output_tokens', 0)} out"
        return [Line(f"{when} ── usage: {tokens}", "dim")]
    return _block(f"{when} {where}", str(record.get("text", "") or record), "dim")


def parse_line(raw: str) -> dict[str, Any]:
    """One transcript line as a record; a line that is not JSON is shown as it is."""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {"stream": "stdout", "type": "raw", "text": raw.rstrip("\n")}


def render_lines(lines: Iterable[str], full: bool = False) -> Iterator[Line]:
    """Every line of a transcript, rendered; the pieces of a message an agent streams in
    pieces (`delta` text records in a row, of one stream) as the one message they make."""
    pieces: list[dict[str, Any]] = []
    for raw in lines:
        if not raw.strip():
            continue
        record = parse_line(raw)
        piece = record.get("type") == "text" and record.get("delta") is True
        if piece and (not pieces or pieces[0].get("stream") == record.get("stream")):
            pieces.append(record)
            continue
        if pieces:
            yield from _joined(pieces, full)
            pieces = []
        if piece:
            pieces.append(record)
        else:
            yield from render_record(record, full)
    if pieces:
        yield from _joined(pieces, full)


def _joined(pieces: list[dict[str, Any]], full: bool) -> list[Line]:
    """Streamed pieces as one text record, at the time of the first."""
    text = "".join(str(piece.get("text", "")) for piece in pieces)
    return render_record({**pieces[0], "text": text}, full)
