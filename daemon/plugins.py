"""Plugins by entry-point group: the names installed packages register, and loading one by name.

loopd's own agent adapters and notifiers are registered in its pyproject.toml exactly as a
third-party package registers its own (`[project.entry-points."loopd.agents"]`); listing the
names reads only the installed packages' metadata, and a plugin's module is imported when a
loop first uses it, so `loopd --help` and `loopd check` import no plugin code.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points

AGENTS = "loopd.agents"
NOTIFIERS = "loopd.notifiers"
GUIDE = "docs/adapters.md"
# The class each group's plugins subclass, by qualified name: this module sits below them all
# (tests/test_plugins.py checks the names against the classes).
BASES = {
    AGENTS: "daemon.agents.base.AgentAdapter",
    NOTIFIERS: "daemon.people.notify.base.Notifier",
}


class PluginError(Exception):
    """A plugin that is not installed, does not import, or is not the class its group needs."""


@dataclass(frozen=True)
class Registered:
    """One name of a group: where it points and which package registered it."""

    name: str
    value: str  # "module:Class"
    package: str  # the distribution that registered it ("" when unknown)


# loopd's own entries, exactly as pyproject.toml registers them (tests/test_plugins.py checks):
# a checkout run without being installed, or installed before the groups existed, has no
# metadata for them, and loopd's own adapters must not vanish for it.
SHIPPED: dict[str, dict[str, str]] = {
    AGENTS: {
        name: f"daemon.agents.{name}:{name.capitalize()}Adapter"
        for name in ("qwen", "claude", "codex", "aider", "opencode", "gemini", "command")
    },
    NOTIFIERS: {
        "command": "daemon.people.notify.command:CommandNotifier",
        "webhook": "daemon.people.notify.webhook:WebhookNotifier",
        "apprise": "daemon.people.notify.apprise_urls:AppriseNotifier",
    },
}


def _package(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return str(dist.name) if dist is not None else ""


def registered(group: str) -> dict[str, Registered]:
    """Every name of `group` the installed packages register (loopd's own first)."""
    return _scan(group)[0]


@cache
def _scan(group: str) -> tuple[dict[str, Registered], dict[str, Registered]]:
    """The names of `group`, and the names a second package registers again (clashes); reads
    every installed package's metadata (~40 ms for 200 packages), once a process."""
    found = {
        name: Registered(name, value, "loopd") for name, value in SHIPPED.get(group, {}).items()
    }
    clashes: dict[str, Registered] = {}
    for point in entry_points(group=group):
        entry = Registered(point.name, point.value, _package(point))
        known = found.get(point.name)
        if known is None:
            found[point.name] = entry
        elif known.value != entry.value and known.package != "loopd":
            clashes[point.name] = entry
    # A package cannot take a name loopd or another package already has: loopd keeps its own
    # names; between two plugins, using the name says which packages both register it.
    return found, clashes


def forget() -> None:
    """Read the installed packages again at the next lookup (a plugin installed since: `loopd
    reload` sees it; a module already imported stays as it was until loopd restarts)."""
    importlib.invalidate_caches()
    _scan.cache_clear()


def names(group: str) -> tuple[str, ...]:
    """The names of `group`, loopd's own first in their order, then the plugins' sorted."""
    found = registered(group)
    own = [name for name in SHIPPED.get(group, {}) if name in found]
    return (*own, *sorted(name for name in found if name not in own))


def installed_here() -> str:
    """Where a plugin must be installed to be found: loopd's own environment."""
    return sys.prefix


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def is_own(group: str, name: str) -> bool:
    """Whether `name` is one of loopd's own entries of `group` (not a plugin's)."""
    return name in SHIPPED.get(group, {})


def is_installed(group: str, name: str) -> bool:
    """Whether `name` is registered in `group`; loopd's own names need no metadata read."""
    return is_own(group, name) or name in registered(group)


def load(group: str, name: str) -> type:
    """The class registered as `name` in `group`, imported now; PluginError says why it cannot
    be used (not installed, registered twice, fails to import, not a subclass of its base)."""
    own = SHIPPED.get(group, {}).get(name)
    # loopd's own names are loopd's (a package registering one again is ignored): loading
    # them reads no package metadata, which keeps `loopd check` and a run's start fast.
    found, clashes = ({name: Registered(name, own, "loopd")}, {}) if own else _scan(group)
    entry = found.get(name)
    if entry is None:
        raise PluginError(
            f"no {group} plugin {name!r} is installed (installed: {', '.join(names(group))}). "
            f"Fix: install the package that registers {name!r} in the {group!r} entry-point "
            f"group into loopd's environment ({installed_here()}), or use an installed name "
            f"({GUIDE})"
        )
    clash = clashes.get(name)
    if clash is not None:
        raise PluginError(
            f"{group} plugin {name!r} is registered twice: by {entry.package or '?'} "
            f"({entry.value}) and by {clash.package or '?'} ({clash.value}). "
            f"Fix: uninstall one of the two packages"
        )
    who = f"{name!r} of package {entry.package or '?'} ({entry.value})"
    try:
        loaded = EntryPoint(name, entry.value, group).load()
    except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is reported
        raise PluginError(
            f"{group} plugin {who} failed to import: {type(exc).__name__}: {exc}. "
            f"Fix: repair or reinstall {entry.package or 'the package'} in {installed_here()}"
        ) from exc
    base = BASES[group]
    if not (isinstance(loaded, type) and base in {_qualified(c) for c in loaded.__mro__}):
        raise PluginError(
            f"{group} plugin {who} is not a {base} subclass (it is {loaded!r}). Fix: point "
            f"the entry point at a subclass of {base.rpartition('.')[2]} ({GUIDE})"
        )
    if getattr(loaded, "name", None) != name:
        raise PluginError(
            f"{group} plugin {who} says its name is {getattr(loaded, 'name', None)!r}. "
            f"Fix: set `name = {name!r}` on the class, the name its entry point registers"
        )
    return loaded
