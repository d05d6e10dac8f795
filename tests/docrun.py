"""Run the docs' marked blocks, as a reader would type them, in a fresh project.

A fenced block runs when an HTML comment (invisible on the site) comes right before it:

    <!-- run -->                      a sh block: bash -e, in the reader's directory;
                                      a pycon block: the session, in `manage.py shell`, output compared
    <!-- run: write PATH -->          the block is the whole file PATH (relative to that directory)
    <!-- run: append PATH -->         the block goes at the end of PATH (settings.py's additions)
    <!-- run: background -->          a sh block that keeps running (runserver): started, left running

Blocks without a comment are fragments or illustrations and never run. The directory (`cd`) and
exported variables carry from one sh block to the next, as in one terminal. One substitution is
made, so that a test never needs port 8000: `127.0.0.1:8000` (and a bare `runserver`) become a
free port.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK = re.compile(r"^<!-- run(?::\s*(\w+)(?:\s+(\S+))?)?\s*-->\s*\n```(\w+)\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    action: str  # "run", "write", "append", "background"
    path: str
    language: str
    text: str

    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: Path, root: Path) -> list[Block]:
    text = doc.read_text(encoding="utf-8")
    found = []
    for match in MARK.finditer(text):
        action, path, language, body = match.group(1) or "run", match.group(2) or "", match.group(3), match.group(4)
        line = text.count("\n", 0, match.start()) + 2
        found.append(Block(str(doc.relative_to(root)), line, action, path, language, body))
    return found


@dataclass
class Reader:
    """One reader's terminal: a directory, exported variables, and what they left running."""

    cwd: Path
    env: dict[str, str]
    port: int
    log: list[str] = field(default_factory=list)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    session: list[Block] = field(default_factory=list)  # pycon blocks typed in one shell, not yet run

    def follow(self, block: Block) -> None:
        if block.language == "pycon":
            self.session.append(block)  # the page's next prompts are typed in the same shell
            return
        self.finish()
        self.log.append(f"--- {block.where()} ({block.action} {block.language} {block.path})".rstrip())
        if block.action == "write":
            self._file(block).write_text(block.text, encoding="utf-8")
        elif block.action == "append":
            with self._file(block).open("a", encoding="utf-8") as f:
                f.write("\n" + block.text)
        elif block.language in ("sh", "bash", "console"):
            if block.action == "background":
                self._start(block)
            else:
                self._shell(block)
        else:
            raise AssertionError(f"{block.where()}: no way to run a {block.language} block")

    def _file(self, block: Block) -> Path:
        path = self.cwd / block.path
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _localize(self, text: str) -> str:
        text = text.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        return re.sub(r"\brunserver\s*$", f"runserver 127.0.0.1:{self.port} --noreload", text, flags=re.M)

    def _shell(self, block: Block) -> None:
        state = self.cwd.parent / ".docrun-state"
        script = (
            f"set -euo pipefail\ncd {shlex.quote(str(self.cwd))}\n{self._localize(block.text)}\n"
            f"pwd > {shlex.quote(str(state))}.cwd\nexport -p > {shlex.quote(str(state))}.env\n"
        )
        result = subprocess.run(["bash", "-c", script], env=self.env, capture_output=True, text=True, timeout=300)
        self.log.append(result.stdout + result.stderr)
        assert result.returncode == 0, f"{block.where()} exited {result.returncode}:\n{self.transcript()}"
        self.cwd = Path(Path(f"{state}.cwd").read_text().strip())
        self.env = _exported(Path(f"{state}.env"), self.env)

    def _start(self, block: Block) -> None:
        process = subprocess.Popen(
            ["bash", "-c", f"cd {shlex.quote(str(self.cwd))}\nexec {self._localize(block.text).strip()}"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.background.append(process)
        deadline = time.monotonic() + 60
        while not _answers(self.port):
            assert process.poll() is None, f"{block.where()}: exited with {process.returncode}"
            assert time.monotonic() < deadline, f"{block.where()}: nothing answers on port {self.port} after 60 s"
            time.sleep(0.2)

    def finish(self) -> None:
        """Run the shell session the last pycon blocks make (one `manage.py shell`), output compared
        as doctest compares it."""
        if not self.session:
            return
        typed, self.session = self.session, []
        self.log.append("--- " + ", ".join(b.where() for b in typed) + " (one shell session)")
        session = self.cwd.parent / ".docrun-session.txt"
        session.write_text("\n".join(b.text for b in typed), encoding="utf-8")
        code = (
            "import doctest, sys\n"
            f"text = open({str(session)!r}, encoding='utf-8').read()\n"
            "test = doctest.DocTestParser().get_doctest(text, {}, 'session', None, 0)\n"
            f"runner = doctest.DocTestRunner(optionflags={doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE})\n"
            "runner.run(test)\n"
            "sys.exit(1 if runner.failures else 0)\n"
        )
        result = subprocess.run(
            [str(self.env["DOCRUN_PYTHON"]), "manage.py", "shell", "-c", code],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.log.append(result.stdout + result.stderr)
        assert result.returncode == 0, f"{typed[0].where()}: the session differs:\n{self.transcript()}"

    def transcript_all(self) -> str:
        return "\n".join(self.log)

    def transcript(self) -> str:
        return "\n".join(self.log)[-6000:]

    def close(self) -> None:
        for process in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def _exported(dump: Path, before: dict[str, str]) -> dict[str, str]:
    """The variables `export -p` listed: what the reader's terminal holds for the next block."""
    env = dict(before)
    for line in dump.read_text().splitlines():
        match = re.match(r'^declare -x ([A-Za-z_][A-Za-z0-9_]*)="(.*)"$', line)
        if match:
            env[match.group(1)] = match.group(2).encode().decode("unicode_escape")
    return env


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
