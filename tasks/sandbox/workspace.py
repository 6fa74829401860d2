"""What both sandboxes share about a workspace: its git settings, the commands' environment, output normalisation.

The local and the docker sandbox keep their baseline in a git directory of their own and diff the workspace against it
with the same settings, give commands the same fixed environment, and strip pytest's session time from output the
same way, so one task shows the same bytes in either.
"""

from __future__ import annotations

import re

from tasks.sandbox.task_python import task_python

FIXED_DATE = "2000-01-01T00:00:00+0000"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "spectune",
    "GIT_AUTHOR_EMAIL": "spectune@localhost",
    "GIT_AUTHOR_DATE": FIXED_DATE,
    "GIT_COMMITTER_NAME": "spectune",
    "GIT_COMMITTER_EMAIL": "spectune@localhost",
    "GIT_COMMITTER_DATE": FIXED_DATE,
}
# `git -c` settings for every git the sandbox runs itself (as root, on the host): no hooks, no
# fsmonitor, no line-ending conversion, no signing, stable abbreviations, no attributes file of the user's.
GIT_CONFIG = (
    "core.attributesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.abbrev=12",
    "core.quotePath=true",
    "commit.gpgsign=false",
    "gc.auto=0",
    "init.defaultBranch=main",
    "safe.directory=*",
)
# `git diff` of the workspace against the baseline: no colour, no external tools, fixed prefixes.
DIFF_FLAGS = (
    "--cached",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--binary",  # a binary file in the workspace must not make the whole diff unappliable
    "--src-prefix=a/",
    "--dst-prefix=b/",
)
# $GIT_DIR/info/attributes of the sandbox's own baseline repository (both sandboxes): the highest precedence of all
# attribute sources, and `!attr` (unspecified) there counts as decided, so no .gitattributes of the workspace (nor a
# macro it defines, `binary` = `-diff -merge -text` included) can change how a file is added or diffed: no eol or
# encoding conversion, no clean filter, no `$Id$` collapse, no `-diff` hiding a text file behind a binary patch. Every
# attribute git itself reads is listed; `diff` left unspecified means git's own test (a NUL byte: binary).
BASELINE_ATTRIBUTES = (
    "* !text !crlf !eol !ident !filter !working-tree-encoding !diff !merge !conflict-marker-size !whitespace"
    " !export-ignore !export-subst !delta !encoding !binary"
)
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# pytest's final summary line ends with the session's wall time: "=== 3 passed, 1 warning in
# 0.12s ===", "3 passed in 0.12s" (-q), "=== 1 failed in 75.02s (0:01:15) ===", "no tests ran in
# 0.01s". The time, and the `=` padding whose width depends on it, vary from run to run;
# normalize_output rewrites such lines to "=== 3 passed, 1 warning ===" / "3 passed".
PYTEST_SUMMARY_RE = re.compile(
    r"^(?P<eq>=+ )?"
    r"(?P<counts>(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)(?:, )?)+"
    r"|no tests ran)"
    r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?(?(eq) =+)$",
    re.MULTILINE,
)


def normalize_output(text: str) -> str:
    """Strip pytest's session time from its summary lines (see PYTEST_SUMMARY_RE)."""

    def repl(m: re.Match[str]) -> str:
        return f"=== {m['counts']} ===" if m["eq"] else m["counts"]

    return PYTEST_SUMMARY_RE.sub(repl, text)


def command_env(extra_path: str | None = None, home: str = "/tmp") -> dict[str, str]:
    """The whole environment of a command: fixed values only, nothing inherited from the caller.

    PATH starts with `extra_path`, by default the task environment's bin (`task_python()`: the
    host's interpreter with pytest and nothing of spectune's), then /usr/local/bin:/usr/bin:/bin.
    """
    bindir = extra_path if extra_path is not None else str(task_python().bindir)
    path = [bindir, "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "PATH": ":".join(dict.fromkeys(p for p in path if p)),
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "COLUMNS": "80",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # prints and tracebacks interleave in the order they happen
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # task code runs with the plugins it names, no others
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    env.update(GIT_IDENTITY)
    return env


def git_env(home: str) -> dict[str, str]:
    """Environment of the git the sandbox runs itself (not a command's): no user or system configuration."""
    return {
        "PATH": SBIN_PATH,
        "HOME": home,
        "LC_ALL": "C",
        "TZ": "UTC",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",  # nor the system's gitattributes file (GIT_CONFIG_NOSYSTEM does not cover it)
        **GIT_IDENTITY,
    }
