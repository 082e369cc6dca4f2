"""Home resolution and layout, and `loopd init`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.config import LoadedConfig, load_home
from daemon.homepath import home_path, is_home
from daemon.state.atomic import ensure_dir
from daemon.state.readme import write_state_readme
from daemon.state.store import StateStore


@dataclass
class Home:
    """A folder holding `loopd.toml`, `loops/`, `rules/` and `state/`."""

    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / "loopd.toml"

    @property
    def loops_dir(self) -> Path:
        return self.root / "loops"

    @property
    def rules_dir(self) -> Path:
        return self.root / "rules"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def load(self) -> LoadedConfig:
        return load_home(self.root)

    def state(self, events_rotate: int | None = None) -> StateStore:
        if events_rotate is None:
            events_rotate = self.load().daemon.limits.events_rotate
        return StateStore(self.state_dir, events_rotate=events_rotate)


def resolve_home(explicit: str | None = None, cwd: Path | None = None) -> Home:
    """`--home DIR`, else `$LOOPD_HOME`, else the current folder when it is a home."""
    return Home(home_path(explicit, cwd))


EXAMPLE_CONFIG = """\
# loopd.toml: the daemon's configuration. Every key is optional. docs/configuration.md in
# loopd's source tree lists every key with its default and range; `loopd check` validates.

# [verifier]                 # the separate model that judges results (critic, rules)
# base_url = "http://127.0.0.1:8000/v1"    # vLLM, llama.cpp server, Ollama, LM Studio
# model = "qwen3-30b-a3b-instruct"         # should differ from the agents' model
# api_key_env = ""           # name of an env var holding the key; keys never live in files
# timeout = "60s"
# pending_limit = "6h"       # endpoint unreachable this long while a run waits: escalate

# Agent profiles, named by loops with `agent = "..."`. An adapter's own name ("qwen",
# "claude", "codex", ...) works without a profile; "example" is the built-in example agent.
# [agents.qwen]
# adapter = "qwen"           # qwen | claude | codex | aider | opencode | gemini | command
# model = "qwen3-coder-30b-a3b-instruct"
# base_url = "http://127.0.0.1:8000/v1"
# api_key_env = "LOCAL_LLM_KEY"
#
# [agents.mine]
# adapter = "command"        # any program: {prompt} is replaced, else the prompt is on stdin
# command = ["my-agent", "--task", "{prompt}"]

# [notify]
# command = ["notify-send", "loopd"]   # argv; the message is appended; never a shell
# webhook = ""                         # POST of the escalation as JSON
# urls = []                            # apprise URLs, e.g. ["ntfy://ntfy.sh/TOPIC"]

# [listen]                   # webhooks of GitHub, Gitea/Forgejo, GitLab; /metrics; /healthz
# bind = "127.0.0.1:8787"    # plain HTTP: a reverse proxy does TLS (docs/hosted.md)
# trusted_proxies = ["127.0.0.1"]  # that proxy: its X-Forwarded-For names the client
#
# [remotes.app]              # a hosted repository; a loop follows it: hosted = "app"
# kind = "github"            # github | gitea (Forgejo too) | gitlab
# repository = "me/app"
# clone_url = "git@github.com:me/app.git"
# secret_env = "LOOPD_APP_WEBHOOK_SECRET"

# [sandbox]                  # where agents and checks run; `loopd check` says which is in force
# mode = "auto"              # auto (bubblewrap when it runs here) | bwrap | off
# writable = []              # extra paths they may write, e.g. ["~/.cache/pip"]
# readable = []              # extra paths they may read, e.g. ["~/.rustup"]
# network = true

[limits]
max_concurrent_runs = 1
# retain_days = 30
# transcript_cap = "50MB"
# prompt_cap = "100KB"
# shutdown_grace = "30s"
# worktrees = "~/.cache/loopd/worktrees"
# events_rotate = "64MB"
# state_max = "20GB"        # all of state/ (unset: the smaller of 20GB and a quarter of the disk)
# max_wait = "12h"           # a run parked on its agent's usage limit escalates past this
# daily_tokens = 0           # tokens all loops may spend a day; then new runs wait (0: none)
# timezone = ""              # whose midnight starts that day (default: this machine's zone)
# max_processes = 1024       # each run's processes at once (the agent's, setup's, checks')
# max_memory = "8GB"         # each run's memory (unset: the smaller of 8GB and half the RAM)
# max_tmp = "1GB"            # each tmpfs of the sandbox, and the agent's HOME and TMPDIR
# max_file_size = "100MB"    # the largest file the agent may write
# max_tree = "10GB"          # a run's tree (each entry 4KB at least); `loopd check` says how

# [rules]
# max_breadth = 0.3          # a learned rule firing on more of other loops' runs stays in trial
# [engine]                   # where schedules and runs happen; see "Past one machine"
# kind = "local"             # local (this process) | temporal (a Temporal cluster, workers
#                            # on any machine: `loopd worker`)
# address = "127.0.0.1:7233"
# namespace = "default"
# remote = ""                # a git repository every worker can reach (run branches)
"""

EXAMPLE_LOOP = """\
# loops/example.toml: the embedded example. The first `loopd run` of a home without runs
# runs it once, to show a whole run: loopd prepares a tiny repository at
# ~/.cache/loopd/example (a module whose tests fail) and the built-in example agent, a
# small script in place of a coding agent (no model needed), fixes it on the run's branch.
# Your own loop: `loopd new NAME --repo PATH` writes loops/NAME.toml from your repository
# (or copy this file and set repo, task, agent and done_when); then set enabled = false here.
enabled = true
repo = "~/.cache/loopd/example"   # a git repository (~ is expanded; relative: to the home)
task = "Make the failing tests pass without weakening them."
agent = "example"                 # a profile from loopd.toml, or an adapter such as "qwen"
# schedule = ["0 2 * * *"]        # five-field cron, standard meaning; 0 and 7 are Sunday
# timezone = "Europe/Berlin"      # the schedule's zone (default UTC)
# catch_up = "1h"                 # a schedule missed while loopd was down runs once if this recent
# on_push = ["main"]              # branch globs, fired by `loopd hooks install`
# hosted = "app"                  # a [remotes.NAME]: its pushes, by webhook or poll
# on_remote_push = ["main"]       # (poll = "60s" where no webhook reaches)
# on_change = ["src/**"]          # path globs inside the repository, debounced
overlap = "coalesce"              # coalesce | skip | queue
isolation = "clone"               # a private clone and branch loopd/LOOP/RUN_ID per run
done_when = ["python3 -m unittest -q"]   # all must exit 0; run by loopd in the run's tree
# setup = ["python3 -m venv .venv", ".venv/bin/pip install -e ."]   # in the run's tree, first
# skip_if_done = true             # done_when passes where a run starts: `skipped`, no agent
# build_on = "base"               # "last-success": go on from the last successful run's branch
# land = "branch"                 # keep the branch for review | "merge" into target | "push"
# target = "main"                 # the branch to land on (default: the branch base names)
check_timeout = "10m"
protect = ["test_*.py"]           # the agent may not change these
max_attempts = 3
attempt_timeout = "45m"
stall_after = "5m"
max_nudges = 2
critic = "off"                    # auto (default): [verifier] judges attempts when there is one
# critic_threshold = 7
notify_on = ["escalated"]
# runs_on = ""                    # [engine] kind = "temporal": `loopd worker --queue NAME`
"""


def init_home(path: Path) -> list[Path]:
    """Make a home at `path` with commented examples; in an existing home only what is
    missing of its folders and `state/README.md`, never an example the person deleted."""
    existing = is_home(path)
    path.mkdir(parents=True, exist_ok=True)
    written = []
    for sub in ("loops", "rules/trial", "rules/active", "rules/rejected", "rules/retired"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    ensure_dir(path / "state")
    if not existing:
        for rel, text in (("loopd.toml", EXAMPLE_CONFIG), ("loops/example.toml", EXAMPLE_LOOP)):
            target = path / rel
            if not target.exists():
                target.write_text(text)
                written.append(target)
    readme = write_state_readme(path / "state")
    if readme is not None:
        written.append(readme)
    return written
